"""AP@k — average precision (trec_eval ``map_cut``; uncut ``AP`` is trec_eval ``map``).

    AP@k = (1 / |relevant|) * sum_{i <= k, doc i relevant} P@i          (0 when |relevant| = 0)

The denominator is the number of judged relevant documents of the query, not min(k, |relevant|)
(trec_eval's ``map_cut``; Buckley & Voorhees, SIGIR 2000). Its mean is MAP.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking, safe_div
from .measures import Family, Measure, register


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Average precision of every query for each measure."""
    out = []
    sums: dict[int, np.ndarray] = {}
    ranks = np.arange(1, ranking.depth + 1, dtype=np.float64)
    for m in measures:
        rel = m.relevance(relevance_level)
        if rel not in sums:
            prec = ranking.relevant_cumsum(rel) / ranks
            sums[rel] = np.cumsum(np.where(ranking.relevant(rel), prec, 0.0), axis=1)
        out.append(safe_div(sums[rel][:, ranking.column(m.cutoff)], ranking.num_rel(rel)))
    return out


AP = register(
    Family(
        "AP",
        "average precision (trec_eval map_cut / map)",
        cutoff="optional",
        params=("rel",),
        compute=compute,
        aliases=("map",),
    )
)
