"""Recall against exact search (tasks.index.recall.measure_recall): the tie rule, the caps, and FAISS's
approximate indexes tracking it on their first search (Chroma's: tests/index/test_chroma.py)."""

from __future__ import annotations

import numpy as np
import pytest

from irflow.tasks.index.faiss_index import build_index
from irflow.tasks.index.recall import measure_recall, recall_against_exact


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_ties_at_the_cut_count_and_misses_do_not():
    docs = np.array([[1, 0], [0.8, 0.6], [0.8, 0.6], [0, 1]], dtype=np.float32)  # rows 1 and 2 tie for 2nd
    query = np.array([[1, 0]], dtype=np.float32)
    assert recall_against_exact(docs, query, np.array([[0, 2]]), ks=[1, 2]) == {"recall_at_1": 1.0, "recall_at_2": 1.0}
    assert recall_against_exact(docs, query, np.array([[2, 0]]), ks=[1, 2]) == {"recall_at_1": 0.0, "recall_at_2": 1.0}
    assert recall_against_exact(docs, query, np.array([[0, 3]]), ks=[2]) == {"recall_at_2": 0.5}
    assert recall_against_exact(docs, query, np.array([[0, -1]]), ks=[2]) == {"recall_at_2": 0.5}  # -1: no hit
    assert recall_against_exact(docs, query, np.array([[0, 1, 2, 3]]), ks=[10]) == {"recall_at_10": 1.0}  # k > n
    with pytest.raises(ValueError, match="recall@2 needs 2 results"):
        recall_against_exact(docs, query, np.array([[0]]), ks=[2])


def test_measure_recall_samples_evenly_and_searches_deep_enough():
    docs, queries = _unit(300, 8, 0), _unit(2500, 8, 1)
    calls = []

    def search(q: np.ndarray, k: int):
        calls.append((len(q), k))
        scores = q @ docs.T
        rows = np.argsort(-scores, axis=1)[:, :k]
        return np.take_along_axis(scores, rows, axis=1), rows

    out = measure_recall(docs, queries, search, rows=np.zeros((2500, 10), np.int64))  # too shallow: searched again
    assert calls == [(1000, 100)] and out == {"recall_at_10": 1.0, "recall_at_100": 1.0, "recall_queries": 1000}
    _, rows = search(queries[:50], 100)
    assert measure_recall(docs, queries[:50], search, rows=rows)["recall_queries"] == 50 and len(calls) == 2


def test_faiss_hnsw_tracks_recall_on_its_first_search_and_flat_does_not():
    docs, queries = _unit(3000, 32, 2), _unit(200, 32, 3)
    hnsw = build_index(docs, "hnsw", {"M": 4, "efConstruction": 8, "efSearch": 4})  # a poor graph: recall < 1
    assert "index_recall_at_10" not in hnsw.tracking()
    _, rows = hnsw.search(queries, 10)
    tracked = hnsw.tracking()
    full = queries @ docs.T
    kth = -np.partition(-full, 9, axis=1)[:, 9:10]
    expected = np.mean(np.take_along_axis(full, rows, axis=1) >= kth - 1e-5)
    assert tracked["index_recall_at_10"] == pytest.approx(expected, abs=1e-6) and expected < 0.95
    assert 0 < tracked["index_recall_at_100"] < 1 and tracked["index_recall_queries"] == 200
    flat = build_index(docs)
    flat.search(queries, 10)
    assert not any(key.startswith("index_recall") for key in flat.tracking())


def test_a_systems_index_recall_is_its_worst_approximate_index() -> None:
    """What metrics.json's cost and the report show: the lowest recall of any index inside the system."""
    from irflow.tasks.retrieve.costs import index_recall

    hybrid = {
        "system": "hybrid",
        "members": {
            "bm25": {"system": "bm25"},
            "dense(index=hnsw)": {"system": "d1", "index_recall_at_10": 0.99, "index_recall_at_100": 0.97},
            "rerank": {"first_stage": {"index_recall_at_10": 0.95, "index_recall_at_100": 0.98}},
        },
    }
    assert index_recall(hybrid) == {"index_recall_at_10": 0.95, "index_recall_at_100": 0.97}
    assert index_recall({"system": "bm25"}) == {}
