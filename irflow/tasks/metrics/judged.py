"""Judged@k — the share of the top k that is judged (ir_measures ``Judged``; Sakai 2007's check of
how far a run can be trusted on incomplete judgements).

    Judged@k = |documents in the top k with a judgement (any grade >= 0, 0 included)| / k

A negative grade is trec_eval's "in the pool but unjudged", so it does not count (irflow's own
datasets hold grades 0-1000 only).

Like P@k the denominator is k even when fewer than k documents were retrieved. A low Judged@10
says the system's numbers rest on unjudged documents, which every other measure counts as not
relevant: pool and judge them (``irflow pool``), or read ``Bpref`` and condensed-list measures
(``nDCG(judged_only=True)@10``) beside the usual ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking
from .measures import Family, Measure, register


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Judged share of the top k of every query for each measure."""
    judged = np.cumsum(ranking.grades >= 0, axis=1, dtype=np.int64)
    out = []
    for m in measures:
        assert m.cutoff is not None  # Judged requires a cutoff (Measure checks it)
        out.append(judged[:, ranking.column(m.cutoff)] / float(m.cutoff))
    return out


JUDGED = register(
    Family(
        "Judged",
        "share of the top k that is judged (ir_measures Judged)",
        cutoff="required",
        params=(),
        compute=compute,
        condensed=False,
    )
)
