"""A run file is evaluated as trec_eval reads it (issue 24): every line counts unless ``depth`` is given, and a
document missing from the corpus keeps its rank (relevant only where the qrels judge it).

The reference is pytrec_eval on the whole file; irflow reads the file through ``retrieve("run:...")``,
the path ``irflow run`` takes, and scores it with its metrics stage.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from irflow.tasks.core.schema import Dataset
from irflow.tasks.metrics import evaluate, mean
from irflow.tasks.metrics.measures import parse_measures
from irflow.tasks.retrieve import retrieve

pytrec_eval = pytest.importorskip("pytrec_eval")

MEASURES = ["Bpref", "nDCG@10", "nDCG(judged_only=True)@10", "RR@10"]
DEPTH = 150


def collection() -> tuple[Dataset, dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """200 documents, 12 queries, graded and non-relevant judgements down to rank 150, and a run 150 deep
    whose rank 1 is a document missing from the corpus in every fourth query (judged relevant in q08,
    non-relevant in q12, unjudged in q04)."""
    rng = np.random.default_rng(7)
    docs = [f"d{i:03d}" for i in range(200)]
    queries = [f"q{i:02d}" for i in range(1, 13)]
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for n, q in enumerate(queries, 1):
        ranked = list(rng.permutation(docs)[:DEPTH])
        if n % 4 == 0:
            ranked = [f"gone-{q}", *ranked[: DEPTH - 1]]
        scores = np.sort(rng.uniform(0, 100, DEPTH))[::-1]
        run[q] = {d: float(s) for d, s in zip(ranked, scores)}
        judged = rng.choice(np.arange(1, DEPTH), size=24, replace=False)  # ranks 2..150 (0-based 1..149)
        qrels[q] = {ranked[i]: int(g) for i, g in zip(judged, rng.choice([0, 0, 1, 2], size=24))}
        qrels[q][str(rng.choice(docs[150:]))] = 1  # a relevant document the run never retrieves
    qrels["q08"]["gone-q08"] = 2
    qrels["q12"]["gone-q12"] = 0
    qrels["q05"]["gone-unretrieved"] = 1  # judged, missing from the corpus, retrieved by no one
    dataset = Dataset(
        "fidelity",
        "test",
        pd.DataFrame({"doc_id": docs, "title": "", "text": [f"text {d}" for d in docs]}),
        pd.DataFrame({"query_id": queries, "text": [f"query {q}" for q in queries]}),
        pd.DataFrame(
            [(q, d, g) for q, ds in qrels.items() for d, g in ds.items()], columns=["query_id", "doc_id", "relevance"]
        ),
        {"fingerprint": "fidelity"},
    )
    return dataset, qrels, run


def write_trec(run: dict[str, dict[str, float]], path: Path) -> str:
    lines = [
        f"{q} Q0 {d} {rank} {s!r} t\n"
        for q, ds in run.items()
        for rank, (d, s) in enumerate(sorted(ds.items(), key=lambda x: -x[1]), 1)
    ]
    path.write_text("".join(lines))
    return f"run:{path}"


def reference(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """pytrec_eval on the whole run: bpref, ndcg_cut_10, recip_rank of the top 10, and ndcg_cut_10 of the run
    without its unjudged documents (trec_eval -J)."""

    def top(ds: dict[str, float], k: int) -> dict[str, float]:
        return dict(sorted(ds.items(), key=lambda x: (x[1], x[0]), reverse=True)[:k])

    def measure(names: set[str], ranking: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        return pytrec_eval.RelevanceEvaluator(qrels, names).evaluate(ranking)

    whole = measure({"bpref", "ndcg_cut.10"}, run)
    rr = measure({"recip_rank"}, {q: top(ds, 10) for q, ds in run.items()})
    condensed = measure({"ndcg_cut.10"}, {q: {d: s for d, s in ds.items() if d in qrels[q]} for q, ds in run.items()})
    return {
        q: {
            "Bpref": whole[q]["bpref"],
            "nDCG@10": whole[q]["ndcg_cut_10"],
            "nDCG(judged_only=True)@10": condensed[q]["ndcg_cut_10"],
            "RR@10": rr[q]["recip_rank"],
        }
        for q in qrels
    }


def irflow_scores(dataset: Dataset, spec: str, depth: int | None = None) -> tuple[pd.DataFrame, dict]:
    result = retrieve(dataset, spec, depth)
    per_query = evaluate(result.run, dataset.qrels, parse_measures(MEASURES))
    return per_query.pivot(index="query_id", columns="metric", values="value"), result.info


def test_a_run_file_150_deep_with_missing_documents_scores_as_trec_eval_reads_it(tmp_path: Path) -> None:
    dataset, qrels, run = collection()
    spec = write_trec(run, tmp_path / "run.trec")
    got, info = irflow_scores(dataset, spec)
    expected = reference(qrels, run)
    for q in qrels:
        for m in MEASURES:
            assert got.loc[q, m] == pytest.approx(expected[q][m], abs=1e-12), (q, m)
    means = mean(evaluate(retrieve(dataset, spec).run, dataset.qrels, parse_measures(MEASURES)))
    for m in MEASURES:
        assert means[m] == pytest.approx(np.mean([expected[q][m] for q in qrels]), abs=1e-12), m
    assert (info["run_depth"], info["unknown_documents"], info["unknown_document_hits"]) == (DEPTH, 3, 3)
    assert info["dropped_hits"] == 0
    assert expected["q08"]["RR@10"] == 1.0 and expected["q04"]["RR@10"] < 1.0  # the missing documents matter
    # cut at the depth irflow's own systems default to, Bpref would differ: the file is not cut by default
    cut, _ = irflow_scores(dataset, spec, depth=100)
    assert not np.allclose(cut["Bpref"].to_numpy(), got["Bpref"].to_numpy())
    assert retrieve(dataset, spec, 10).run.groupby("query_id").size().max() == 10  # a given depth still cuts


def test_a_missing_document_above_a_relevant_one_halves_rr(tmp_path: Path) -> None:
    """The issue's case: ``q4 Q0 not-in-corpus 1 2.0`` above ``q4 Q0 d047 2 1.0``."""
    dataset, _, _ = collection()
    dataset = Dataset(
        "fidelity",
        "test",
        dataset.corpus.assign(doc_id=dataset.corpus["doc_id"]),
        pd.DataFrame({"query_id": ["q4"], "text": ["q"]}),
        pd.DataFrame({"query_id": ["q4"], "doc_id": ["d047"], "relevance": [1]}),
        {"fingerprint": "fidelity-rr"},
    )
    path = tmp_path / "two.trec"
    path.write_text("q4 Q0 not-in-corpus 1 2.0 t\nq4 Q0 d047 2 1.0 t\n")
    got, info = irflow_scores(dataset, f"run:{path}")
    assert got.loc["q4", "RR@10"] == 0.5
    assert got.loc["q4", "nDCG@10"] == pytest.approx(1 / np.log2(3), abs=1e-12)
    assert info["unknown_document_hits"] == 1
