"""Success@k — 1 if at least one relevant document is in the top k, else 0 (trec_eval ``success``).

Also known as hit rate; its mean is the fraction of queries answered in the top k.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking
from .measures import Family, Measure, register


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Success of every query for each measure."""
    return [(ranking.relevant_at(m.relevance(relevance_level), m.cutoff) > 0).astype(np.float64) for m in measures]


SUCCESS = register(
    Family(
        "Success",
        "1 if a relevant document is in the top k (trec_eval success)",
        cutoff="required",
        params=("rel",),
        compute=compute,
        aliases=("hitrate", "hit_rate"),
    )
)
