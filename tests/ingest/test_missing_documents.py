"""Judgements of documents absent from the corpus are kept, as trec_eval and BEIR keep them.

A BEIR-layout collection is cut from SciFact (test split) with some judged documents removed from
the corpus: five queries lose every relevant document, ten lose one of several. ``irflow`` imports
it, runs BM25 and a tuned BM25 (the gap is the judgements', whatever retrieves: a dense model would only
add an encode), and its means must equal pytrec_eval's over *all* judged queries (the five score 0 on recall
and nDCG, they are not dropped), and the report names the gap.
"""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from pathlib import Path

import pytest
from support.cli import irflow
from support.scifact import SCIFACT_ZIP, require_scifact

from irflow.tasks.core.runs import read_trec
from irflow.tasks.systems.specs import as_spec

pytestmark = pytest.mark.e2e

pytrec_eval = pytest.importorskip("pytrec_eval")
SYSTEMS = ["bm25", "bm25:k1=1.2,b=0.75"]
MEASURES = {"nDCG@10": "ndcg_cut_10", "R@100": "recall_100"}


def scifact_with_missing_documents(folder: Path) -> tuple[dict[str, dict[str, int]], set[str], set[str]]:
    """Write the collection into ``folder``; returns (all test qrels, removed doc ids, queries left with none)."""
    with zipfile.ZipFile(SCIFACT_ZIP) as zf:
        corpus = [json.loads(line) for line in zf.read("scifact/corpus.jsonl").decode().splitlines() if line]
        queries = zf.read("scifact/queries.jsonl").decode()
        rows = list(csv.reader(io.StringIO(zf.read("scifact/qrels/test.tsv").decode()), delimiter="\t"))[1:]
    qrels: dict[str, dict[str, int]] = {}
    for q, d, g in rows:
        qrels.setdefault(q, {})[d] = int(g)
    relevant_to: dict[str, set[str]] = {}
    for q, docs in qrels.items():
        for d in docs:
            relevant_to.setdefault(d, set()).add(q)
    # queries whose relevant documents are relevant to no other query: removing them affects only that query
    alone = sorted(q for q, docs in qrels.items() if all(relevant_to[d] == {q} for d in docs))
    emptied = set(alone[:5])
    partial = [q for q in alone[5:] if len(qrels[q]) >= 2][:10]
    removed = {d for q in emptied for d in qrels[q]} | {min(qrels[q]) for q in partial}
    judged = {d for docs in qrels.values() for d in docs}
    others = [doc for doc in corpus if doc["_id"] not in judged][:400]
    kept = [doc for doc in corpus if doc["_id"] in judged - removed] + others
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in kept))
    (folder / "queries.jsonl").write_text(queries)
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q, d, g in rows)
    )
    return qrels, removed, emptied


@pytest.mark.shared
def test_judgements_of_missing_documents_count_as_trec_eval_counts_them(tmp_path: Path) -> None:
    require_scifact()
    qrels, removed, emptied = scifact_with_missing_documents(tmp_path / "scifact-missing")
    assert len(emptied) == 5 and len(removed) > 5
    env = {
        **os.environ,
        "IRFLOW_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "HF_HUB_OFFLINE": "1",
    }
    done = irflow("datasets", "import", str(tmp_path / "scifact-missing"), "--format", "beir", "--name", "sm", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(removed)} judged documents are not in the corpus" in done.stdout
    assert "5 can score nothing" in done.stdout

    out = tmp_path / "out"
    args = ["run", "--dataset", "sm", "--latency-runs", "0", "--output", str(out)]
    args += [x for s in SYSTEMS for x in ("--system", s)] + [x for m in MEASURES for x in ("--metric", m)]
    done = irflow(*args, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((out / "metrics.json").read_text())
    assert document["dataset"]["queries"] == len(qrels) == 300, "no judged query is dropped"
    assert document["dataset"]["missing_documents"]["documents"] == len(removed)
    report = (out / "report.md").read_text()
    assert f"{len(removed)} judged documents are not in the corpus" in report

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"})
    for system in SYSTEMS:
        run = read_trec(out / "runs" / f"{as_spec(system).slug}.trec")
        assert not set(run["doc_id"]) & removed
        scored: dict[str, dict[str, float]] = {}
        for q, d, s in zip(run["query_id"], run["doc_id"], run["score"]):
            scored.setdefault(q, {})[d] = float(s)
        expected = evaluator.evaluate(scored)
        for metric, key in MEASURES.items():
            per_query = {q: expected.get(q, {}).get(key, 0.0) for q in qrels}
            assert all(per_query[q] == 0.0 for q in emptied)
            mean = sum(per_query.values()) / len(qrels)
            assert document["systems"][system][metric] == pytest.approx(mean, abs=1e-12), (system, metric)
