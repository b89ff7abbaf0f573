"""A click log simulated with a position-based model over true judgements (tests of click-derived qrels)."""

from __future__ import annotations

import numpy as np
import pandas as pd

EXAMINATION = 1.0 / np.arange(1, 11) ** 0.9  # θ_k: users look less far down
ATTRACTIVENESS = {0: 0.04, 1: 0.2, 2: 0.45, 3: 0.85}  # γ by true grade


def simulate(qrels: pd.DataFrame, run: pd.DataFrame, sessions: int, seed: int) -> pd.DataFrame:
    """One row per impression: each session shows a query's top 10 of ``run``, lightly shuffled (as a
    production ranker with some exploration), and clicks with probability θ_k · γ(true grade)."""
    rng = np.random.default_rng(seed)
    grade = {(q, d): g for q, d, g in qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False)}
    tops = {q: group.sort_values("rank")["doc_id"].tolist()[:10] for q, group in run.groupby("query_id")}
    rows = []
    for query, top in tops.items():
        for _ in range(sessions):
            shown = list(top)
            for i in range(len(shown) - 1):  # adjacent swaps: every document seen at several positions
                if rng.random() < 0.35:
                    shown[i], shown[i + 1] = shown[i + 1], shown[i]
            for position, doc in enumerate(shown, 1):
                p = EXAMINATION[position - 1] * ATTRACTIVENESS[grade.get((query, doc), 0)]
                rows.append((query, doc, position, int(rng.random() < p)))
    return pd.DataFrame(rows, columns=["query_id", "doc_id", "position", "clicked"])
