"""A lenient judge and a few human labels over the demo dataset techdocs, as stored datasets: the files the
package ships for docs/calibration.md's walkthrough (``irflow/datasets/techdocs/examples/``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from irflow.tasks import ingest

LABELS = Path(__file__).resolve().parents[2] / "irflow" / "datasets" / "techdocs" / "examples"


def judge_and_human_qrels(human_queries: int = 30, seed: int = 26) -> dict[str, str]:
    """The text of ``judge.qrels`` (techdocs' qrels with a third of the judgements raised by one grade, at most
    3) and ``human.qrels`` (techdocs' own qrels of its first ``human_queries`` queries), as TREC qrels."""
    qrels = ingest.load_dataset("techdocs").qrels.sort_values(["query_id", "doc_id"], ignore_index=True)
    rng = np.random.default_rng(seed)
    raised = rng.random(len(qrels)) < 1 / 3
    judge = qrels.assign(relevance=np.where(raised, np.minimum(qrels["relevance"] + 1, 3), qrels["relevance"]))
    first = sorted(qrels["query_id"].unique())[:human_queries]
    human = qrels[qrels["query_id"].isin(first)]
    out = {}
    for name, table in (("judge", judge), ("human", human)):
        lines = [f"{q} 0 {d} {g}" for q, d, g in table[["query_id", "doc_id", "relevance"]].itertuples(index=False)]
        out[name] = "\n".join(lines) + "\n"
    return out


def techdocs_judge_and_human(folder: Path) -> tuple[str, str]:
    """Store ``td-judge`` and ``td-human`` from the shipped label files, as docs/calibration.md does; returns
    their names."""
    for name, dataset in (("judge", "td-judge"), ("human", "td-human")):
        ingest.import_dataset(LABELS / f"{name}.qrels", "trec-qrels", dataset, base="techdocs")
    return "td-judge", "td-human"


def pipeline_answers() -> dict[str, str]:
    """The text of docs/rag.md's two answers files over techdocs (``pipeline-a.jsonl``, ``pipeline-b.jsonl``):
    each query's top 5 of a BM25 system as contexts and the first sentence of the top one as the answer;
    pipeline-a (k1=0.5, b=0.3) also cites a document and answers a query techdocs does not have."""
    import json

    from irflow.tasks.retrieve.searchers import retrieve

    dataset = ingest.load_dataset("techdocs")
    texts = dict(zip(dataset.corpus["doc_id"].astype(str), dataset.corpus["text"].astype(str), strict=True))
    out = {}
    for name, system in (("pipeline-a", "bm25:k1=0.5,b=0.3"), ("pipeline-b", "bm25")):
        run = retrieve(dataset, system, 5).run.sort_values(["query_id", "rank"])
        rows = []
        for qid, docs in run.groupby("query_id", sort=True)["doc_id"]:
            ids = docs.astype(str).tolist()
            answer = texts[ids[0]].split(". ")[0].strip().rstrip(".") + "."
            rows.append({"query_id": str(qid), "answer": answer, "contexts": [{"doc_id": d} for d in ids]})
        if name == "pipeline-a":
            rows[0]["contexts"].append({"doc_id": "td-doc-9999"})
            rows.append({"query_id": "td-q-999", "answer": "Not in the dataset.", "contexts": [{"doc_id": ids[0]}]})
        out[name] = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    return out
