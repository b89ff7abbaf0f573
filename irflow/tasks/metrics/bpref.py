"""Bpref — binary preference (Buckley & Voorhees, SIGIR 2004), as trec_eval ``bpref`` computes it.

For each relevant retrieved document r, with R relevant and N judged non-relevant documents::

    Bpref = (1/R) · Σ_r (1 − min(n_r, R) / min(R, N))

where n_r is the number of judged non-relevant documents ranked above r (a term is 1 when n_r = 0).
Unjudged documents are skipped, not counted as non-relevant: that is the point of the measure,
which stays stable when judgements are incomplete. The whole run is read (no cutoff); 0 when R = 0.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._core import Ranking, safe_div
from .measures import Family, Measure, register


def compute(ranking: Ranking, measures: Sequence[Measure], relevance_level: int) -> list[np.ndarray]:
    """Bpref of every query for each measure."""
    out = []
    for m in measures:
        rel = m.relevance(relevance_level)
        num_rel = ranking.num_rel(rel).astype(np.float64)
        judged_nonrel = (ranking.qrels_grade >= 0) & (ranking.qrels_grade < rel)
        num_nonrel = np.bincount(ranking.qrels_query[judged_nonrel], minlength=ranking.n_queries).astype(np.float64)
        grades = ranking.grades
        nonrel = (grades >= 0) & (grades < rel)
        above = np.minimum(np.cumsum(nonrel, axis=1) - nonrel, num_rel[:, None])  # n_r, capped at R
        denominator = np.minimum(num_rel, num_nonrel)[:, None]
        term = np.where(above > 0, 1.0 - safe_div(above, np.broadcast_to(denominator, above.shape)), 1.0)
        out.append(safe_div(np.where(grades >= rel, term, 0.0).sum(axis=1), num_rel))
    return out


BPREF = register(
    Family(
        "Bpref",
        "binary preference on incomplete judgements (trec_eval bpref)",
        cutoff="forbidden",
        params=("rel",),
        compute=compute,
        aliases=("bpref",),
        condensed=False,
    )
)
