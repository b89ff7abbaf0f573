"""evaluate() and mean(): every requested measure for every judged query, in one pass.

Per-query semantics are trec_eval's (``trec_eval -c -l relevance_level``):

* judged queries are the query ids of ``qrels``; run rows of other queries are ignored;
* a judged query missing from the run scores 0 on every measure (``-c``), so it counts in
  the mean (pytrec_eval leaves it out of its result instead);
* a judged query whose judgements are all non-relevant (no grade >= the level, e.g. all grade 0)
  is evaluated like any other: no relevant document can be found, every measure is 0 (trec_eval
  and pytrec_eval report it with 0 too, and average it in). It is *not* dropped, so the mean
  matches ``trec_eval -c``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import InputError

from ._core import build_ranking
from .measures import FAMILIES, Family, Measure, parse_measures

COLUMNS = ("query_id", "metric", "value")
MAX_EXP_GRADE = 1000  # 2^1000 gains summed over millions of documents still fit a double (max ~2^1024)


def _depths(measures: Sequence[Measure], relevance_level: int) -> dict[str, int | None]:
    """How deep build_ranking must lay out the run and the ideal ranking for these measures."""
    depth: int | None = 0
    ideal: int | None = 0
    rank_depth_for_rel: int | None = None
    for m in measures:
        family = FAMILIES[m.family]
        if family.depth == "relevant":
            rel = m.relevance(relevance_level)
            rank_depth_for_rel = rel if rank_depth_for_rel is None else min(rank_depth_for_rel, rel)
            continue
        depth = None if m.cutoff is None or depth is None else max(depth, m.cutoff)
        if family.ideal:
            ideal = None if m.cutoff is None or ideal is None else max(ideal, m.cutoff)
    return {"depth": depth, "ideal_depth": ideal, "rank_depth_for_rel": rank_depth_for_rel}


def evaluate(
    run: pd.DataFrame,
    qrels: pd.DataFrame,
    measures: Iterable[Measure | str],
    *,
    relevance_level: int = 1,
) -> pd.DataFrame:
    """Per-query values, one row per judged query × metric.

    ``run``: ``query_id``, ``doc_id``, ``score`` (a ``rank`` column is ignored: the order is
    always score descending, then doc id descending, as trec_eval). ``qrels``: ``query_id``,
    ``doc_id``, ``relevance``. ``measures``: :class:`Measure` objects or canonical names.
    A document is relevant when its grade >= ``relevance_level`` (a measure's own ``rel``
    overrides it). Returns columns ``query_id`` (str), ``metric`` (canonical name), ``value``
    (float64), sorted by query id, measures in the order given.

    Raises :class:`tasks.core.schema.InputError` for a (query_id, doc_id) pair that appears twice in
    the run (trec_eval refuses it; pytrec_eval's dict input would silently keep one) or in the
    qrels, for missing columns, NaN scores or non-integer grades.
    """
    if isinstance(relevance_level, bool) or not isinstance(relevance_level, (int, np.integer)) or relevance_level < 1:
        raise ValueError(f"relevance_level must be an int >= 1, got {relevance_level!r}")
    relevance_level = int(relevance_level)
    ms = parse_measures(measures)
    if not ms:
        raise ValueError("evaluate: no measures requested")
    if any(m.dcg == "exp-log2" for m in ms):
        check_exp_gains(qrels)
    nm = len(ms)
    values = np.empty((0, nm), dtype=np.float64)
    for condensed in (False, True):  # the run as given, then the condensed list (judged_only=True)
        columns = [j for j, m in enumerate(ms) if m.judged_only == condensed]
        if not columns:
            continue
        ranking = build_ranking(
            judged_only(run, qrels) if condensed else run, qrels, **_depths([ms[j] for j in columns], relevance_level)
        )
        if len(values) != ranking.n_queries:
            values = np.empty((ranking.n_queries, nm), dtype=np.float64)
        by_family: dict[Family, list[int]] = {}
        for j in columns:
            by_family.setdefault(FAMILIES[ms[j].family], []).append(j)
        for family, cols in by_family.items():
            results = family.compute(ranking, [ms[j] for j in cols], relevance_level)
            for j, v in zip(cols, results):
                values[:, j] = v
    nq = ranking.n_queries

    return pd.DataFrame(
        {
            "query_id": pd.array(np.repeat(ranking.query_ids, nm), dtype="str"),
            "metric": pd.array(np.tile(np.array([m.name for m in ms], dtype=object), nq), dtype="str"),
            "value": values.reshape(-1),
        }
    )


def judged_only(run: pd.DataFrame, qrels: pd.DataFrame) -> pd.DataFrame:
    """The condensed run: only the rows whose (query, document) pair is judged (Sakai 2007); a negative
    grade is trec_eval's "in the pool but unjudged", so it does not count as judged."""
    judged = qrels[pd.to_numeric(qrels["relevance"], errors="coerce") >= 0]
    pairs = pd.MultiIndex.from_arrays([judged["query_id"].astype(str), judged["doc_id"].astype(str)])
    keep = pd.MultiIndex.from_arrays([run["query_id"].astype(str), run["doc_id"].astype(str)]).isin(pairs)
    return run[keep]


def check_exp_gains(qrels: pd.DataFrame) -> None:
    """Refuse grades whose exp-log2 gain 2^g − 1 would overflow a double in a DCG sum (g > MAX_EXP_GRADE)."""
    grades = pd.to_numeric(qrels["relevance"], errors="coerce")
    too_big = grades > MAX_EXP_GRADE
    if too_big.any():
        row = qrels[too_big].iloc[0]
        raise InputError(
            f"qrels: grade {row['relevance']} (query {row['query_id']!r}, document {row['doc_id']!r}) is too large "
            f"for nDCG(dcg='exp-log2'): its gain 2^g - 1 overflows a double; expected grades up to {MAX_EXP_GRADE} "
            "(or the linear gain, nDCG@k)"
        )


def mean(per_query: pd.DataFrame) -> dict[str, float]:
    """Mean of each measure over the rows of ``per_query`` (all judged queries, as evaluate() gives).

    Keys are canonical measure names, in the order they first appear.
    """
    if len(per_query) == 0:
        return {}
    means = per_query.groupby("metric", sort=False)["value"].mean()
    return {str(k): float(v) for k, v in means.items()}
