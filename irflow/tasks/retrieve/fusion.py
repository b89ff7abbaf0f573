"""Fusion and reranking on run tables: reciprocal-rank fusion with exact tie handling, and a second
stage's scores applied to a first stage's top hits."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import pandas as pd

from irflow.tasks.core.runs import empty_run, order_run

# ---------------------------------------------------------------------------------------------
# fusion and reranking, on run tables


def fuse_rrf(runs: Sequence[pd.DataFrame], weights: Sequence[float] | None = None, k: int = 60) -> pd.DataFrame:
    """Reciprocal-rank fusion (Cormack et al. 2009): score(d) = sum_s w_s / (k + rank_s(d)).

    A document missing from a run adds nothing for it, nor does a run of weight 0. Each run needs
    a ``rank`` column (1-based).
    Scores are exact: two documents whose fused scores are equal as rational numbers get the same
    float (the correctly rounded sum), so the doc-id tie rule orders them, whatever the member order.
    """
    weights = [1.0] * len(runs) if weights is None else [float(w) for w in weights]
    if len(weights) != len(runs):
        raise ValueError(f"{len(weights)} weights for {len(runs)} runs")
    if runs and not any(w > 0 for w in weights):
        raise ValueError(f"fusion weights {weights} are all zero: every document would tie")
    parts = [
        run.loc[:, ["query_id", "doc_id"]].assign(
            score=w / (k + run["rank"].to_numpy(dtype=np.float64)), weight=w, rank=run["rank"].to_numpy(np.int64)
        )
        for run, w in zip(runs, weights)
        if w != 0
    ]
    if not parts:
        return empty_run()
    contributions = pd.concat(parts, ignore_index=True).astype({"query_id": "str", "doc_id": "str"})
    # One summation order per multiset of contributions, so permuted ranks give identical floats ...
    contributions = contributions.sort_values(["query_id", "doc_id", "score"], kind="mergesort", ignore_index=True)
    fused = contributions.groupby(["query_id", "doc_id"], as_index=False, sort=False)["score"].sum()
    # ... and exact rational sums wherever two fused scores are close enough for rounding to matter.
    near = _near_ties(fused)
    if near.any():
        keys = fused.loc[near, ["query_id", "doc_id"]]
        exact = contributions.merge(keys, on=["query_id", "doc_id"])
        sums: dict[tuple[str, str], Fraction] = {}
        for qid, did, w, r in exact[["query_id", "doc_id", "weight", "rank"]].itertuples(index=False):
            sums[(qid, did)] = sums.get((qid, did), Fraction(0)) + Fraction(w) / (k + int(r))
        fused.loc[near, "score"] = [float(sums[key]) for key in keys.itertuples(index=False, name=None)]
    return order_run(fused)


def _near_ties(fused: pd.DataFrame, relative: float = 1e-12) -> np.ndarray:
    """Rows whose score lies within ``relative`` of another score of the same query (float sums can
    differ in the last bits there: the rows whose exact value decides their order)."""
    order = np.lexsort((fused["score"].to_numpy(), fused["query_id"].to_numpy()))
    qid = fused["query_id"].to_numpy()[order]
    score = fused["score"].to_numpy()[order]
    close = (qid[1:] == qid[:-1]) & (np.abs(score[1:] - score[:-1]) <= relative * np.abs(score[1:]))
    flagged = np.zeros(len(fused), dtype=bool)
    flagged[order[1:][close]] = True
    flagged[order[:-1][close]] = True
    return flagged


def apply_rerank(run: pd.DataFrame, top: int, scores: Sequence[float]) -> pd.DataFrame:
    """Replace the scores of each query's top ``top`` hits by ``scores`` (in run order) and re-order them;
    hits below keep their first-stage order beneath every reranked hit (scores min - 1, min - 2, ...)."""
    run = order_run(run)
    head_mask = (run["rank"] <= top).to_numpy()
    head, tail = run[head_mask].copy(), run[~head_mask].copy()
    if len(scores) != len(head):
        raise ValueError(f"{len(scores)} rerank scores for {len(head)} hits")
    head["score"] = np.asarray(scores, dtype=np.float64)
    floor = head.groupby("query_id")["score"].min()
    tail["score"] = tail["query_id"].map(floor).to_numpy(dtype=np.float64) - (tail["rank"] - top).to_numpy(np.float64)
    return order_run(pd.concat([head, tail], ignore_index=True))
