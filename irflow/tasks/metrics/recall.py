"""R@k — recall (trec_eval ``recall``), and R_cap@k — BEIR's capped recall.

    R@k     = |relevant in the top k| / |relevant|            (0 when |relevant| = 0)
    R_cap@k = |relevant in the top k| / min(k, |relevant|)    (Thakur et al., BEIR, NeurIPS 2021)

|relevant| counts every judged document with grade >= rel, retrieved or not. Uncut ``R`` is
trec_eval's ``set_recall`` (the whole run).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ._core import Ranking, safe_div
from .evaluate import per_query
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


def recall(run: pd.DataFrame, qrels: pd.DataFrame, k: int | None = 100, *, rel: int = 1) -> pd.Series:
    """Per-query R@k (k=None: the whole run), indexed by query_id."""
    return per_query(Measure(R.name, k, rel=rel), run, qrels)


def capped_recall(run: pd.DataFrame, qrels: pd.DataFrame, k: int = 100, *, rel: int = 1) -> pd.Series:
    """Per-query R_cap@k, indexed by query_id."""
    return per_query(Measure(R_CAP.name, k, rel=rel), run, qrels)


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
