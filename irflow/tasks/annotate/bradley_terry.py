"""Bradley–Terry scores per query from soft pairwise outcomes (the zELO of each document).

Model (Bradley & Terry 1952): P(i beats j) = π_i / (π_i + π_j) = σ(s_i − s_j) with s = log π,
so scores are natural-log strengths, zbench's zELO scale. Fitted by the minorise–maximise
iteration of Hunter (2004, "MM algorithms for generalized Bradley–Terry models", Ann. Stat. 32):

    π_i ← W_i / Σ_j N_ij / (π_i + π_j)

with W_i the (soft) wins of i and N_ij the battles between i and j. A weak symmetric prior — each
document plays ``prior`` virtual battles against a fixed reference of strength 1 and wins half —
keeps unanimous votes (a document that wins every battle) finite and joins the scores of a
battle graph that falls apart into pieces. Reported scores are shifted to zero mean per query.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from irflow.tasks.annotate.config import DEFAULT_PRIOR


@dataclass(frozen=True)
class Fit:
    """Zero-mean scores, and how the iteration ended (``change`` = last max |Δ log π|)."""

    scores: np.ndarray
    iterations: int
    converged: bool
    change: float


def fit(wins: np.ndarray, *, prior: float = DEFAULT_PRIOR, tol: float = 1e-9, max_iter: int = 100_000) -> Fit:
    """Bradley–Terry scores from ``wins[i, j]`` = (soft) number of times i beat j; vectorised MM."""
    wins = np.asarray(wins, dtype=np.float64)
    k = wins.shape[0]
    if wins.shape != (k, k) or (wins < 0).any() or not np.isfinite(wins).all():
        raise ValueError("wins must be a square matrix of finite, non-negative counts")
    if not prior > 0:
        raise ValueError(f"prior must be > 0 (it keeps scores finite), got {prior}")
    if k == 0:
        return Fit(np.zeros(0), 0, True, 0.0)
    won = wins.sum(axis=1) + prior / 2
    games = wins + wins.T
    pi = np.ones(k)
    change, iteration = np.inf, 0
    while iteration < max_iter and change >= tol:
        iteration += 1
        new = won / ((games / (pi[:, None] + pi[None, :])).sum(axis=1) + prior / (pi + 1.0))
        change = float(np.abs(np.log(new / pi)).max())
        pi = new
    scores = np.log(pi)
    return Fit(scores - scores.mean(), iteration, change < tol, change)


def wins_matrix(doc_ids: list[str], doc_a: np.ndarray, doc_b: np.ndarray, p_b: np.ndarray) -> np.ndarray:
    """``wins[i, j]`` from battles (a, b, share won by b); battles without an outcome (NaN) add nothing."""
    index = {d: i for i, d in enumerate(doc_ids)}
    ok = ~np.isnan(p_b)
    a = np.array([index[d] for d in doc_a[ok]], dtype=np.int64)
    b = np.array([index[d] for d in doc_b[ok]], dtype=np.int64)
    wins = np.zeros((len(doc_ids), len(doc_ids)))
    np.add.at(wins, (b, a), p_b[ok])
    np.add.at(wins, (a, b), 1.0 - p_b[ok])
    return wins


def fit_queries(
    candidates: pd.DataFrame, combined: pd.DataFrame, *, prior: float = DEFAULT_PRIOR
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-document scores (query_id, doc_id, rank, score, battles) and per-query convergence
    (query_id, documents, battles, iterations, converged, change) from combined pair outcomes."""
    by_query = {q: g for q, g in combined.groupby("query_id", sort=False)}
    docs, report = [], []
    for qid, group in candidates.sort_values(["query_id", "rank"], kind="stable").groupby("query_id", sort=True):
        ids = group["doc_id"].astype(str).tolist()
        pairs = by_query.get(qid, combined.iloc[:0])
        outcome = pairs["p_b"].to_numpy(np.float64)
        wins = wins_matrix(ids, pairs["doc_a"].to_numpy(), pairs["doc_b"].to_numpy(), outcome)
        result = fit(wins, prior=prior)
        battles = (wins + wins.T).sum(axis=1)
        docs.append(group[["query_id", "doc_id", "rank"]].assign(score=result.scores, battles=battles))
        report.append(
            (qid, len(ids), int((~np.isnan(outcome)).sum()), result.iterations, result.converged, result.change)
        )
    scores = (
        pd.concat(docs, ignore_index=True)
        if docs
        else pd.DataFrame(columns=["query_id", "doc_id", "rank", "score", "battles"])
    )
    columns = ["query_id", "documents", "battles", "iterations", "converged", "change"]
    return scores, pd.DataFrame(report, columns=columns)
