"""P@k — precision at a cutoff (trec_eval ``P``).

    P@k = |relevant in the top k| / k

The denominator is k even when fewer than k documents were retrieved (trec_eval's convention).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking
from .measures import Family, Measure, register


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Precision of every query for each measure."""
    out = []
    for m in measures:
        assert m.cutoff is not None  # P requires a cutoff (Measure checks it)
        out.append(ranking.relevant_at(m.relevance(relevance_level), m.cutoff) / float(m.cutoff))
    return out


P = register(
    Family(
        "P", "precision at k (trec_eval P)", cutoff="required", params=("rel",), compute=compute, aliases=("precision",)
    )
)
