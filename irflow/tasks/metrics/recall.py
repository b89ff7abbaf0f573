"""R@k — recall (trec_eval ``recall``), and R_cap@k — BEIR's capped recall.

    R@k     = |relevant in the top k| / |relevant|            (0 when |relevant| = 0)
    R_cap@k = |relevant in the top k| / min(k, |relevant|)    (Thakur et al., BEIR, NeurIPS 2021)

|relevant| counts every judged document with grade >= rel, retrieved or not. Uncut ``R`` is
trec_eval's ``set_recall`` (the whole run).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ._core import Ranking
from ._family import one_measure, rel_of, safe_div
from .measures import Measure

FAMILIES = ("R", "R_cap")


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Recall (or capped recall) of every query for each measure."""
    out = []
    for m in measures:
        rel = rel_of(m, relevance_level)
        found = ranking.relevant_at(rel, m.cutoff)
        total = ranking.num_rel(rel)
        if m.family == "R_cap":
            total = np.minimum(total, m.cutoff)
        out.append(safe_div(found, total))
    return out


def recall(run: pd.DataFrame, qrels: pd.DataFrame, k: int | None = 100, *, rel: int = 1) -> pd.Series:
    """Per-query R@k (k=None: the whole run), indexed by query_id."""
    return one_measure(Measure("R", k, rel=rel), run, qrels, 1)


def capped_recall(run: pd.DataFrame, qrels: pd.DataFrame, k: int = 100, *, rel: int = 1) -> pd.Series:
    """Per-query R_cap@k, indexed by query_id."""
    return one_measure(Measure("R_cap", k, rel=rel), run, qrels, 1)
