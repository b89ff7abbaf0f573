"""nDCG — normalised discounted cumulative gain (Järvelin & Kekäläinen, ACM TOIS 20(4), 2002).

    DCG@k  = sum_{i=1..k} gain(g_i) / log2(i + 1)
    nDCG@k = DCG@k / IDCG@k            (0 when IDCG@k = 0)

``gain(g) = g`` for ``dcg='log2'`` (trec_eval ``ndcg_cut`` / ``ndcg``: the grade itself) and
``2^g − 1`` for ``dcg='exp-log2'`` (Burges et al., ICML 2005); non-positive grades and unjudged
documents gain nothing. The ideal ranking IDCG@k is built from *all* judged documents of the
query sorted by grade, as trec_eval does, and nDCG ignores the relevance level. Uncut nDCG
(``nDCG``) is trec_eval's ``ndcg``: the whole run against every positive judgement.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking, safe_div
from .measures import Family, Measure, register


def _gain(grades: np.ndarray, dcg: str) -> np.ndarray:
    pos = np.maximum(grades, 0).astype(np.float64)
    return np.exp2(pos) - 1.0 if dcg == "exp-log2" else pos


def _dcg_cumsum(grades: np.ndarray, dcg: str) -> np.ndarray:
    discount = np.log2(np.arange(2, grades.shape[1] + 2, dtype=np.float64))
    return np.cumsum(_gain(grades, dcg) / discount, axis=1)


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """nDCG of every query for each measure (all cutoffs from one cumulative sum)."""
    out = []
    cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for m in measures:
        if m.dcg not in cache:
            cache[m.dcg] = (_dcg_cumsum(ranking.grades, m.dcg), _dcg_cumsum(ranking.ideal, m.dcg))
        dcg, idcg = cache[m.dcg]
        icol = idcg.shape[1] - 1 if m.cutoff is None else min(m.cutoff, idcg.shape[1]) - 1
        out.append(safe_div(dcg[:, ranking.column(m.cutoff)], idcg[:, icol]))
    return out


NDCG = register(
    Family(
        "nDCG",
        "normalised discounted cumulative gain (trec_eval ndcg_cut / ndcg)",
        cutoff="optional",
        params=("dcg",),
        compute=compute,
        ideal=True,
    )
)
