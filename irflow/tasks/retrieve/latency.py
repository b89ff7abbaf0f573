"""How the latency stage times a system: one call per query, the same thread count for every system,
repeats whose spread is reported, the clock's own cost subtracted, and the machine's load recorded.

What is timed is a searcher's ``query(query_id, text, depth)``: the system's own work for one
query (the bm25s call with its tokenisation; query encoding plus the index search; the HTTP round
trip with the answer's decoding; a Python retriever's ``search``), not the run table irflow builds
from it. Kept free of the searchers (plain callables) so ``tasks.retrieve`` can use it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

DEFAULT_THREADS = 1
"""Threads a system may use while its queries are timed (torch, FAISS/OpenMP, BLAS): one per query,
as a server answering queries in parallel gives each, and the least sensitive to other load."""


@contextlib.contextmanager
def pinned_threads(threads: int) -> Iterator[None]:
    """Limit torch, FAISS (OpenMP) and the BLAS pools to ``threads`` for the block, then restore them.

    Only libraries already imported are touched (nothing heavy is imported to pin it).
    """
    restore: list[Callable[[], None]] = []
    torch = sys.modules.get("torch")
    if torch is not None:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        restore.append(lambda: torch.set_num_threads(before))
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        faiss_before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(threads)
        restore.append(lambda: faiss.omp_set_num_threads(faiss_before))
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn / faiss users' stacks
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(limits=threads)
    try:
        with limits:
            yield
    finally:
        for undo in reversed(restore):
            undo()


def clock_overhead(samples: int = 2000) -> float:
    """Seconds one timed call of a no-op costs in :func:`time_calls`'s loop (median): subtracted from every sample."""
    noop: Callable[[], None] = lambda: None  # noqa: E731
    spent = []
    for _ in range(samples):
        start = time.perf_counter()
        noop()
        spent.append(time.perf_counter() - start)
    return float(np.median(spent))


class Timed(float):
    """Seconds a call measured itself, where its work ran (a plugin in a child process): what
    :func:`time_calls` records for it instead of the time around the call, which adds the trip between
    the processes."""


def time_calls(calls: Sequence[Callable[[], Any]], overhead: float) -> list[float]:
    """Seconds each call took (or, for a call returning :class:`Timed`, the seconds it measured itself),
    minus the clock ``overhead`` (never below zero)."""
    out = []
    for call in calls:
        start = time.perf_counter()
        done = call()
        spent = time.perf_counter() - start
        out.append(max(0.0, (float(done) if isinstance(done, Timed) else spent) - overhead))
    return out


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def spread(repeats: Sequence[Sequence[float]], *, resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """How far p50 and p95 (ms) may move, from ``repeats`` (seconds; each repeat times the same queries in
    the same order):

    * ``p50_ms_min`` / ``_median`` / ``_max`` (and p95's): the percentile of each repeat, summarised
      over the repeats (what rerunning on the same machine at the same moment changes);
    * ``p50_ms_ci_low`` / ``_high`` (and p95's): a 95 % percentile-bootstrap confidence interval
      (Efron & Tibshirani 1993, ch. 13) resampling queries with all their repeats (what another
      draw of queries of the same kind, or another run, may give).
    """
    samples = np.asarray(repeats, dtype=np.float64) * 1000.0  # (repeats, queries)
    per_repeat = np.percentile(samples, [50, 95], axis=1)  # (2, repeats)
    rng = np.random.default_rng(seed)
    n = samples.shape[1]
    draws = []
    step = max(1, 2_000_000 // samples.size)  # resamples per block: bounded memory for large query sets
    for start in range(0, resamples, step):
        rows = rng.integers(0, n, (min(step, resamples - start), n))
        pooled = samples[:, rows].transpose(1, 0, 2).reshape(len(rows), -1)
        draws.append(np.percentile(pooled, [50, 95], axis=1))
    low, high = np.percentile(np.concatenate(draws, axis=1), [2.5, 97.5], axis=1)
    out: dict[str, Any] = {}
    for i, name in enumerate(("p50", "p95")):
        out[f"{name}_ms_min"] = float(per_repeat[i].min())
        out[f"{name}_ms_median"] = float(np.median(per_repeat[i]))
        out[f"{name}_ms_max"] = float(per_repeat[i].max())
        out[f"{name}_ms_ci_low"] = float(low[i])
        out[f"{name}_ms_ci_high"] = float(high[i])
    return out


Hits = list[tuple[str, float]]
"""One query's ranking on the latency path: ``(doc id, score)``, best first, ties by doc id descending."""


def trec_order(hits: Hits) -> Hits:
    """``hits`` sorted as trec_eval ranks them: score descending, ties by doc id descending."""
    return sorted(sorted(hits, key=lambda h: h[0], reverse=True), key=lambda h: h[1], reverse=True)


def fuse_ranked(rankings: Sequence[Hits], weights: Sequence[float], k: int) -> Hits:
    """Reciprocal-rank fusion of single-query rankings (Cormack et al. 2009: sum_s w_s / (k + rank_s(d))):
    the latency path's counterpart of ``tasks.retrieve.fuse_rrf``, without tables (its exact rational
    sums for near-ties are left out: they decide the order of floats equal to ~1e-12, not the work)."""
    fused: dict[str, float] = {}
    for hits, weight in zip(rankings, weights):
        if weight:
            for rank, (doc, _) in enumerate(hits, start=1):
                fused[doc] = fused.get(doc, 0.0) + weight / (k + rank)
    return trec_order(list(fused.items()))


def load_curve(call: Callable[[Any], Any], items: Sequence[Any], levels: Sequence[int]) -> tuple[dict[str, float], ...]:
    """Throughput and latency under load: at each concurrency level, ``call(item)`` for every item by that
    many threads at once; per level queries/s (over the wall time) and p50/p95 per call (ms)."""
    from concurrent.futures import ThreadPoolExecutor

    def timed(item: Any) -> float:
        start = time.perf_counter()
        call(item)
        return time.perf_counter() - start

    curve = []
    for level in levels:
        work = list(items) * max(1, math.ceil(2 * level / len(items)))  # every thread busy at least twice
        with ThreadPoolExecutor(max_workers=level) as pool:
            start = time.perf_counter()
            seconds = list(pool.map(timed, work))
            wall = time.perf_counter() - start
        p50, p95 = np.percentile(np.asarray(seconds) * 1000.0, [50, 95])
        curve.append(
            {
                "concurrency": level,
                "queries": len(work),
                "queries_per_second": len(work) / wall,
                "p50_ms": float(p50),
                "p95_ms": float(p95),
            }
        )
    return tuple(curve)
