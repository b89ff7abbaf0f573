"""RR@k — reciprocal rank of the first relevant document (trec_eval ``recip_rank``).

    RR@k = 1 / rank of the first relevant document if that rank <= k, else 0

Uncut ``RR`` is trec_eval's ``recip_rank``; trec_eval has no cut version, so RR@k equals
``recip_rank`` on the run truncated to its top k (in trec_eval order). Its mean is MRR.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking
from .measures import Family, Measure, register


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Reciprocal rank of every query for each measure."""
    out = []
    first: dict[int, np.ndarray] = {}
    for m in measures:
        rel = m.relevance(relevance_level)
        if rel not in first:
            hits = ranking.relevant(rel)
            rank = hits.argmax(axis=1).astype(np.float64) + 1.0  # 1-based rank of first hit
            rank[~hits.any(axis=1)] = np.inf
            first[rel] = rank
        rank = first[rel]
        limit = np.inf if m.cutoff is None else m.cutoff
        out.append(np.where(rank <= limit, 1.0 / rank, 0.0))
    return out


RR = register(
    Family(
        "RR",
        "reciprocal rank of the first relevant document (trec_eval recip_rank)",
        cutoff="optional",
        params=("rel",),
        compute=compute,
        aliases=("mrr",),
    )
)
