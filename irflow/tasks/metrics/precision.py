"""P@k — precision at a cutoff (trec_eval ``P``).

    P@k = |relevant in the top k| / k

The denominator is k even when fewer than k documents were retrieved (trec_eval's convention).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ._core import Ranking
from ._family import one_measure, rel_of
from .measures import Measure

FAMILY = "P"


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Precision of every query for each measure."""
    return [ranking.relevant_at(rel_of(m, relevance_level), m.cutoff) / float(m.cutoff) for m in measures]


def precision(run: pd.DataFrame, qrels: pd.DataFrame, k: int = 10, *, rel: int = 1) -> pd.Series:
    """Per-query P@k (grade >= rel is relevant), indexed by query_id."""
    return one_measure(Measure(FAMILY, k, rel=rel), run, qrels, 1)
