"""Paired significance tests between systems, on per-query values of any metric.

The unit of comparison is the query: two systems are compared on the same queries, paired by
query id (never across repeated runs of a deterministic system, whose variance is zero). A query
one system did not answer scores 0, as in ``trec_eval -c``.

* :func:`compare` — one baseline against one candidate: paired t-test, Wilcoxon signed-rank,
  Fisher randomization test, paired bootstrap CI of the mean difference, Cohen's d_z, wins/ties/losses.
* :func:`correct` — Holm (1979) or Bonferroni adjustment over a family of p-values.
* :func:`compare_systems` — every system against a baseline (or all pairs) on the long per-query
  table ``system, query_id, metric, value``; the family for the correction is the comparisons of one metric.

Conventions, all differences ``candidate − baseline`` (positive = the candidate is better):

* Wilcoxon signed-rank (scipy, every choice explicit so an upgrade cannot move a p-value):
  ``zero_method="wilcox"`` (queries with a zero difference are dropped before ranking; Wilcoxon
  1945), tied |differences| get average ranks, no continuity correction, two-sided. The null
  distribution is chosen on n, the number of *non-zero* differences: exact when there are no ties and
  n <= 50 (``exact``); with ties and n <= 13 the exact permutation distribution over all 2^n sign flips
  (``permutation``); otherwise the normal approximation with the tie-corrected variance (``normal``). Which one was used
  is ``Comparison.wilcoxon_method``. If every difference is zero, W = 0 and p = 1.
* The confidence interval of the mean difference is a paired bootstrap: ``bca`` (default; Efron
  1987, with Hesterberg's 2015 small-sample expansion) or ``percentile``; see :func:`bootstrap_ci`.
* Per-query values that are NaN are an error (a metric that could not be computed is not a 0),
  unless ``nan_as_zero=True``; a query absent from one system's values scores 0 (``trec_eval -c``).
* d_z = mean(d) / sd(d) with ``ddof=1`` (Cohen 1988; Lakens 2013). When sd = 0 the differences are
  one constant: d_z = 0 if it is 0, else ±inf (a shift without any spread); the t-test likewise gives
  t = 0, p = 1 or t = ±inf, p = 0. Nothing here returns NaN.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, get_args

import numpy as np
import pandas as pd

from irflow.tasks.compare.paired_statistics import (
    CI_METHODS,
    bootstrap_ci,
    effect_size,
    paired_ttest,
    randomization_test,
    signed_rank_test,
)
from irflow.tasks.core.schema import Correction, InputError, UnknownNameError

CORRECTIONS: tuple[str, ...] = get_args(Correction)
PER_QUERY_COLUMNS = ("system", "query_id", "metric", "value")


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of a candidate with a baseline over ``n`` queries (differences candidate − baseline)."""

    n: int
    baseline_mean: float
    candidate_mean: float
    delta: float
    t_stat: float
    p_ttest: float
    w_stat: float
    p_wilcoxon: float
    p_randomization: float
    ci_low: float
    ci_high: float
    effect_size: float
    wins: int
    ties: int
    losses: int
    ci_method: str = "bca"
    wilcoxon_method: str = "exact"

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


COMPARISON_COLUMNS = (
    "metric",
    "baseline",
    "candidate",
    *Comparison.__dataclass_fields__,
    "p_adjusted",
    "correction",
    "significant",
)


def align(
    baseline: pd.Series, candidate: pd.Series, *, nan_as_zero: bool = False
) -> tuple[np.ndarray, np.ndarray, pd.Index]:
    """Pair two per-query series by query id: the union of ids, a missing value scores 0 (``trec_eval -c``).

    Raises InputError for duplicate ids, non-numeric or infinite values, NaN values (unless
    ``nan_as_zero``), or fewer than 2 ids present in both (disjoint ids mean the inputs describe
    different queries, not unanswered ones).
    """
    series = {}
    for name, s in (("baseline", baseline), ("candidate", candidate)):
        ids = s.index.astype(str)
        if not ids.is_unique:
            raise InputError(f"{name}: query id {ids[ids.duplicated()][0]!r} appears more than once")
        try:
            values = pd.to_numeric(s).to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError):
            raise InputError(f"{name}: per-query values must be numbers") from None
        if np.isinf(values).any():
            raise InputError(f"{name}: per-query values must be finite")
        if np.isnan(values).any() and not nan_as_zero:
            where = ", ".join(map(repr, ids[np.isnan(values)][:3]))
            raise InputError(
                f"{name}: {int(np.isnan(values).sum())} per-query values are NaN (queries {where}); a value that "
                "could not be computed is not a 0: fix its source, or pass nan_as_zero=True to count them as 0"
            )
        series[name] = pd.Series(values, index=ids)
    shared = series["baseline"].index.intersection(series["candidate"].index)
    if len(shared) < 2:
        raise InputError(
            f"a paired comparison needs at least 2 queries shared by both systems, got {len(shared)} "
            f"(baseline has {len(baseline)} queries, candidate {len(candidate)})"
        )
    ids = series["baseline"].index.union(series["candidate"].index, sort=False)
    a, b = (series[k].reindex(ids).fillna(0.0).to_numpy() for k in ("baseline", "candidate"))
    return a, b, ids


def compare(
    baseline: pd.Series,
    candidate: pd.Series,
    *,
    permutations: int = 10_000,
    bootstrap: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    ci: str = "bca",
    nan_as_zero: bool = False,
) -> Comparison:
    """Compare ``candidate`` with ``baseline`` on their per-query values (Series indexed by query id).

    Resampling is seeded: the randomization test and the bootstrap draw from independent streams
    of ``SeedSequence(seed)``, so the same inputs and seed give the same numbers. The confidence
    level of the interval is ``1 − alpha``; ``ci`` is its method (:data:`CI_METHODS`).
    """
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must be in (0, 1), got {alpha}")
    a, b, _ = align(baseline, candidate, nan_as_zero=nan_as_zero)
    d = b - a
    perm_rng, boot_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    t_stat, p_t = paired_ttest(a, b)
    w_stat, p_w, w_method = signed_rank_test(a, b)
    low, high = bootstrap_ci(d, bootstrap, alpha, boot_rng, method=ci)
    return Comparison(
        n=int(d.size),
        baseline_mean=float(a.mean()),
        candidate_mean=float(b.mean()),
        delta=float(d.mean()),
        t_stat=t_stat,
        p_ttest=p_t,
        w_stat=w_stat,
        p_wilcoxon=p_w,
        p_randomization=randomization_test(d, permutations, perm_rng),
        ci_low=low,
        ci_high=high,
        effect_size=effect_size(d),
        wins=int(np.count_nonzero(d > 0)),
        ties=int(np.count_nonzero(d == 0)),
        losses=int(np.count_nonzero(d < 0)),
        ci_method=ci,
        wilcoxon_method=w_method,
    )


def correct(pvalues: Sequence[float], method: Correction = "holm") -> list[float]:
    """Family-wise adjusted p-values, in the input order.

    * ``bonferroni``: min(1, m·p).
    * ``holm`` (Holm 1979, step-down): with p sorted ascending, p_adj(i) = max over j ≤ i of
      min(1, (m − j + 1)·p(j)). Reject where p_adj < alpha; never less powerful than Bonferroni.
    """
    if method not in CORRECTIONS:
        raise UnknownNameError(f"unknown correction {method!r}; valid: {', '.join(CORRECTIONS)}")
    p = np.asarray(list(pvalues), dtype=np.float64)
    if p.size == 0:
        return []
    if not np.all((p >= 0.0) & (p <= 1.0)):
        raise InputError(f"p-values must lie in [0, 1], got {p.tolist()}")
    m = p.size
    if method == "bonferroni":
        return np.minimum(1.0, m * p).tolist()
    order = np.argsort(p, kind="mergesort")
    stepped = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    return adjusted.tolist()


def format_p(p: float) -> str:
    """A p-value for people: three decimals, or ``<0.001``."""
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def metric_values(per_query: pd.DataFrame, metric: str, system: str) -> pd.Series:
    """One system's values of one metric from the long table, indexed by query id."""
    rows = per_query[(per_query["system"] == system) & (per_query["metric"] == metric)]
    return pd.Series(
        rows["value"].to_numpy(dtype=np.float64), index=rows["query_id"].astype(str).to_numpy(), name=system
    )


def _check_table(per_query: pd.DataFrame, metric: str, systems: Sequence[str]) -> None:
    missing = [c for c in PER_QUERY_COLUMNS if c not in per_query.columns]
    if missing:
        raise InputError(f"per-query table lacks columns {missing}; expected {list(PER_QUERY_COLUMNS)}")
    metrics = list(dict.fromkeys(per_query["metric"]))
    if metric not in metrics:
        raise UnknownNameError(f"metric {metric!r} is not in the per-query table; available: {', '.join(metrics)}")
    known = list(dict.fromkeys(per_query["system"]))
    for s in systems:
        if s not in known:
            raise UnknownNameError(f"system {s!r} is not in the per-query table; available: {', '.join(known)}")


def compare_systems(
    per_query: pd.DataFrame,
    metric: str,
    baseline: str | None = None,
    *,
    all_pairs: bool = False,
    correction: Correction = "holm",
    permutations: int = 10_000,
    bootstrap: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    ci: str = "bca",
    nan_as_zero: bool = False,
) -> pd.DataFrame:
    """Each system against ``baseline`` (default: the first system in the table), or all pairs, on ``metric``.

    Returns one row per comparison: ``metric, baseline, candidate``, the :class:`Comparison` fields,
    ``p_adjusted`` (the randomization test's p, corrected over this family) and ``significant``
    (p_adjusted < alpha). The randomization test is the primary test (Smucker et al. 2007 found it
    the most reliable of the three in IR; t-test and Wilcoxon are reported beside it).
    """
    systems = list(dict.fromkeys(per_query["system"])) if "system" in per_query.columns else []
    baseline = baseline if baseline is not None else (systems[0] if systems else "")
    _check_table(per_query, metric, [baseline])
    if all_pairs:
        pairs = list(itertools.combinations([baseline] + [s for s in systems if s != baseline], 2))
    else:
        pairs = [(baseline, s) for s in systems if s != baseline]
    if not pairs:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    values = {s: metric_values(per_query, metric, s) for s in systems}
    rows: list[dict[str, Any]] = []
    for base, cand in pairs:
        c = compare(
            values[base],
            values[cand],
            permutations=permutations,
            bootstrap=bootstrap,
            seed=seed,
            alpha=alpha,
            ci=ci,
            nan_as_zero=nan_as_zero,
        )
        rows.append({"metric": metric, "baseline": base, "candidate": cand, **c.as_dict()})
    table = pd.DataFrame(rows)
    table["p_adjusted"] = correct(table["p_randomization"].tolist(), correction)
    table["correction"] = correction
    table["significant"] = table["p_adjusted"] < alpha
    return table[list(COMPARISON_COLUMNS)]


def compare_all(
    per_query: pd.DataFrame, metrics: Sequence[str], baseline: str | None = None, **options: Any
) -> pd.DataFrame:
    """:func:`compare_systems` for every metric in ``metrics``, one family per metric, stacked."""
    frames = [compare_systems(per_query, m, baseline, **options) for m in metrics]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COMPARISON_COLUMNS)


__all__ = [
    "CI_METHODS",
    "COMPARISON_COLUMNS",
    "CORRECTIONS",
    "Comparison",
    "Correction",
    "align",
    "bootstrap_ci",
    "compare",
    "compare_all",
    "compare_systems",
    "correct",
    "format_p",
    "effect_size",
    "metric_values",
    "randomization_test",
]
