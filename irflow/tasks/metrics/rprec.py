"""Rprec — precision at rank R, R = number of relevant judgements (trec_eval ``Rprec``).

    Rprec = |relevant in the top R| / R          (0 when R = 0)

A run shorter than R is not padded up: missing ranks are simply not relevant.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking, safe_div
from .measures import Family, Measure, register


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """R-precision of every query for each measure."""
    out = []
    for m in measures:
        rel = m.relevance(relevance_level)
        r = ranking.num_rel(rel)
        col = np.clip(np.minimum(r, ranking.depth) - 1, 0, None)
        found = ranking.relevant_cumsum(rel)[np.arange(ranking.n_queries), col]
        out.append(safe_div(np.where(r > 0, found, 0), r))
    return out


RPREC = register(
    Family(
        "Rprec",
        "precision at rank R = #relevant (trec_eval Rprec)",
        cutoff="forbidden",
        params=("rel",),
        compute=compute,
        depth="relevant",
    )
)
