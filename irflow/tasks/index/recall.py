"""Recall of an approximate index against exact inner-product search over the same vectors: what
every approximate index (FAISS HNSW/IVF/IVF-PQ, a Chroma collection) reports as ``index_recall_at_k``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

RECALL_KS = (10, 100)
RECALL_QUERIES = 1000
"""Recall against exact search is measured on at most this many queries (evenly spaced, so repeatable)."""
RECALL_TOLERANCE = 1e-5


def exact_search(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` by inner product (FAISS brute force, no index copy): ``(scores, rows)``."""
    import faiss

    k = min(int(k), len(vectors))
    if k <= 0 or len(queries) == 0:
        return np.zeros((len(queries), max(k, 0)), np.float32), np.zeros((len(queries), max(k, 0)), np.int64)
    scores, rows = faiss.knn(
        np.ascontiguousarray(queries, dtype=np.float32),
        np.ascontiguousarray(vectors, dtype=np.float32),
        k,
        metric=faiss.METRIC_INNER_PRODUCT,
    )
    return scores, rows.astype(np.int64, copy=False)


def recall_against_exact(
    vectors: np.ndarray, queries: np.ndarray, rows: np.ndarray, ks: Iterable[int] = RECALL_KS
) -> dict[str, float]:
    """Mean recall@k of approximate result ``rows`` (nq, >= k; -1 = none) against exact inner-product
    search over ``vectors``, for each k in ``ks``: ``{"recall_at_10": ..., ...}``.

    A hit counts when its exact score reaches the k-th exact score (less :data:`RECALL_TOLERANCE`),
    so documents tied at the cut (duplicates) count whichever of them an index returns. k is capped
    at the corpus size.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    queries = np.asarray(queries, dtype=np.float32)
    ks = [int(k) for k in ks]
    kmax = min(max(ks), len(vectors))
    if kmax == 0 or len(queries) == 0:
        return {f"recall_at_{k}": float("nan") for k in ks}
    exact, _ = exact_search(vectors, queries, kmax)
    found = np.full(rows.shape, -np.inf, dtype=np.float32)
    for i, (query, hits) in enumerate(zip(queries, rows)):  # exact scores of what the index returned
        valid = hits >= 0
        found[i, valid] = vectors[hits[valid]] @ query
    out = {}
    for k in ks:
        cut = min(k, kmax)
        if rows.shape[1] < cut:
            raise ValueError(f"recall@{k} needs {cut} results per query, got {rows.shape[1]}")
        threshold = exact[:, cut - 1 : cut] - RECALL_TOLERANCE
        out[f"recall_at_{k}"] = float(np.mean(np.sum(found[:, :cut] >= threshold, axis=1) / cut))
    return out


def measure_recall(
    vectors: np.ndarray,
    queries: np.ndarray,
    search: Any,
    rows: np.ndarray | None = None,
    ks: Iterable[int] = RECALL_KS,
    max_queries: int = RECALL_QUERIES,
) -> dict[str, float]:
    """Recall of ``search`` (an index's ``(queries, k) -> (scores, rows)``) against exact search on
    up to ``max_queries`` evenly spaced ``queries``; ``rows`` (already found for all ``queries``) are
    reused when deep enough. Adds ``recall_queries`` (how many queries it was measured on)."""
    ks = tuple(int(k) for k in ks)
    queries = np.asarray(queries, dtype=np.float32)
    pick = np.unique(np.linspace(0, len(queries) - 1, min(len(queries), max_queries)).round().astype(np.int64))
    kmax = min(max(ks), len(vectors))
    if rows is None or rows.shape[1] < kmax or len(rows) != len(queries):
        _, found = search(queries[pick], kmax)
    else:
        found = rows[pick]
    return {**recall_against_exact(vectors, queries[pick], found, ks), "recall_queries": int(len(pick))}
