"""R@k — recall (trec_eval ``recall``), and R_cap@k — BEIR's capped recall.

    R@k     = |relevant in the top k| / |relevant|            (0 when |relevant| = 0)
    R_cap@k = |relevant in the top k| / min(k, |relevant|)    (Thakur et al., BEIR, NeurIPS 2021)

|relevant| counts every judged document with grade >= rel, retrieved or not. Uncut ``R`` is
trec_eval's ``set_recall`` (the whole run).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking, safe_div
from .measures import Family, Measure, register


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Recall (or capped recall) of every query for each measure."""
    out = []
    for m in measures:
        rel = m.relevance(relevance_level)
        found = ranking.relevant_at(rel, m.cutoff)
        total = ranking.num_rel(rel)
        if m.family == R_CAP.name:
            assert m.cutoff is not None  # R_cap requires a cutoff (Measure checks it)
            total = np.minimum(total, m.cutoff)
        out.append(safe_div(found, total))
    return out


R = register(
    Family(
        "R",
        "recall at k (trec_eval recall; uncut = set_recall)",
        cutoff="optional",
        params=("rel",),
        compute=compute,
        aliases=("recall",),
    )
)
R_CAP = register(
    Family(
        "R_cap",
        "BEIR's capped recall: relevant in top k / min(k, #relevant)",
        cutoff="required",
        params=("rel",),
        compute=compute,
        aliases=("rcap", "recall_cap"),
    )
)
