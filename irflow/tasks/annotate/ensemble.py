"""Combine the judges' votes per pair into one soft outcome, and measure how far judges agree.

A pair's outcome is ``p_b``, the share of the battle document B wins, in [0, 1]:

* ``vote`` (zbench's rule): the fraction of judges preferring B; a judge's exact 0 is half a vote
  (zbench counts it for A).
* ``mean``: ``(1 + mean signed score) / 2``, so confident judges weigh more.

Missing votes are left out (a pair with no valid vote has no outcome and adds nothing to
Bradley–Terry); the per-judge raw score, swap flag and reasoning stay in the vote table for audit.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

METHODS = ("vote", "mean")


def combine(pairs: pd.DataFrame, votes: pd.DataFrame, judges: list[str], method: str = "vote") -> pd.DataFrame:
    """Pairs with ``votes`` (valid), ``missing``, ``p_b`` (NaN without a valid vote) and ``ensemble`` = 2·p_b − 1."""
    if method not in METHODS:
        raise ValueError(f"ensemble method must be one of {', '.join(METHODS)}, not {method!r}")
    mine = votes[votes["judge"].isin(judges)].drop_duplicates(["pair_id", "judge"], keep="last")
    wide = mine.pivot(index="pair_id", columns="judge", values="score").reindex(index=pairs["pair_id"], columns=judges)
    scores = wide.to_numpy(np.float64)
    valid = ~np.isnan(scores)
    count = valid.sum(axis=1)
    share = np.where(scores > 0, 1.0, np.where(scores < 0, 0.0, 0.5)) if method == "vote" else (1.0 + scores) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        p_b = np.where(count > 0, np.where(valid, share, 0.0).sum(axis=1) / np.maximum(count, 1), np.nan)
    out = pairs.reset_index(drop=True).copy()
    out["votes"] = count.astype(np.int64)
    out["missing"] = (len(judges) - count).astype(np.int64)
    out["p_b"] = p_b
    out["ensemble"] = 2.0 * p_b - 1.0
    for j, name in enumerate(judges):
        out[f"score:{name}"] = scores[:, j]
    return out


def inter_judge_agreement(combined: pd.DataFrame, judges: list[str]) -> dict[str, dict[str, float]]:
    """For each judge pair: the share of pairs both judged with a preference (non-zero) on which they agree."""
    out = {}
    for a, b in itertools.combinations(judges, 2):
        x, y = combined[f"score:{a}"].to_numpy(), combined[f"score:{b}"].to_numpy()
        both = ~np.isnan(x) & ~np.isnan(y) & (x != 0) & (y != 0)
        n = int(both.sum())
        out[f"{a} | {b}"] = {
            "agreement": float((np.sign(x[both]) == np.sign(y[both])).mean()) if n else float("nan"),
            "pairs": n,
        }
    return out


def agreement_with_grades(
    combined: pd.DataFrame, qrels: pd.DataFrame, judges: list[str]
) -> dict[str, dict[str, float]]:
    """How often each judge, and the ensemble, prefers the document with the higher human grade.

    Only battles whose two documents both have grades, and different ones, count. A tie (0, or
    p_b = 0.5) scores half; a missing vote is left out.
    """
    grade = qrels.assign(key=qrels["query_id"].astype(str) + "\0" + qrels["doc_id"].astype(str)).set_index("key")[
        "relevance"
    ]
    ga = (combined["query_id"] + "\0" + combined["doc_a"]).map(grade)
    gb = (combined["query_id"] + "\0" + combined["doc_b"]).map(grade)
    usable = ga.notna() & gb.notna() & (ga != gb)
    truth = np.sign((gb - ga)[usable].to_numpy(np.float64))  # +1: B has the higher grade
    out = {}
    for name, column in [*((j, f"score:{j}") for j in judges), ("ensemble", "ensemble")]:
        s = combined.loc[usable, column].to_numpy(np.float64)
        ok = ~np.isnan(s)
        hits = np.where(np.sign(s[ok]) == truth[ok], 1.0, np.where(s[ok] == 0, 0.5, 0.0))
        out[name] = {"agreement": float(hits.mean()) if ok.any() else float("nan"), "pairs": int(ok.sum())}
    return out
