"""An online A/B test analysed at its randomisation unit: ratio metrics, delta-method intervals, SRM.

Every metric is a ratio of two sums over the units (users) of an arm, ``R = Σ_u X_u / Σ_u N_u``, where
``N_u`` is the number of queries unit u issued and ``X_u`` what it got out of them:

* ``ctr``: clicks on u's result pages (clicks per query shown);
* ``success_rate``: u's queries with at least one click;
* ``abandonment``: u's queries without a click (1 − success rate);
* ``mrr``: Σ 1/rank of the first click, 0 for a query without one (needs ``position``);
* ``satisfied_rate``: u's queries with a click dwelt on for 30 s or more (needs ``dwell``);
* ``conversion_rate``: u's queries that converted (needs ``converted``).

(``mrr``: the reciprocal rank of clicks, Radlinski, Kurup and Joachims, "How does clickthrough data
reflect retrieval quality?", CIKM 2008; ``abandonment``: Li, Huffman and Tokuda, SIGIR 2009.)

Users, not queries, were randomised, so queries of one user are not independent and N_u is random: the
variance of R comes from the units. With n units, means X̄, N̄ and sample (co)variances σ², the delta
method (Deng, Lu and Litz, "Applying the delta method in metric analytics", KDD 2018, eq. 4) gives

    Var(R) ≈ (1/n) · (σ_X²/N̄² − 2 X̄ σ_XN/N̄³ + X̄² σ_N²/N̄⁴) = Σ_u (X_u − R N_u)² / ((n−1) · n · N̄²)

per arm; the arms are independent, so the difference Δ = R_t − R_c has variance Var(R_t) + Var(R_c), a
95 % interval Δ ± 1.96·se and a two-sided z-test p-value. The relative difference Δ/R_c has variance
Var(R_t)/R_c² + R_t²·Var(R_c)/R_c⁴ (the delta method again). Treating every query as independent
(:func:`per_impression_variance`) understates the variance by the design effect reported beside it.

A sample-ratio mismatch (:func:`srm_test`: Pearson's chi-square of units per arm against the planned
split; Fabijan et al., "Diagnosing sample ratio mismatch in online controlled experiments", KDD 2019)
below p = 0.001 means the split itself is broken, and no comparison of the arms can be trusted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from irflow.tasks.core.schema import InputError
from irflow.tasks.online.abtest_log import AbLog

SRM_ALPHA = 0.001
Z_95 = 1.959963984540054  # the normal 0.975 quantile


@dataclass(frozen=True)
class Metric:
    """A ratio metric: its per-unit numerator column (the denominator is ``queries``), the column of the sum
    of squares of its per-query value (for the per-impression variance), the log column it needs, and
    what it is in words (the report's definition)."""

    numerator: str
    squares: str
    needs: str
    meaning: str


METRICS: dict[str, Metric] = {
    "ctr": Metric("clicks", "clicks_sq", "clicked", "clicks per query shown"),
    "success_rate": Metric("successes", "successes", "clicked", "share of queries with a click"),
    "abandonment": Metric("abandoned", "abandoned", "clicked", "share of queries without a click"),
    "mrr": Metric("rr", "rr_sq", "position", "mean over queries of 1/rank of the first click (0 without a click)"),
    "satisfied_rate": Metric(
        "satisfied", "satisfied", "dwell", "share of queries with a click dwelt on for 30 s or more"
    ),
    "conversion_rate": Metric("conversions", "conversions", "converted", "share of queries that converted"),
}
"""The metrics by name (0/1 per-query values are their own squares)."""


def ratio_delta(numerator: np.ndarray, denominator: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``R = ΣX/ΣN`` over the units (the last axis) and its delta-method variance (Deng, Lu, Litz 2018).

    Vectorised: leading axes are independent experiments (a simulation's seeds, a log's days).
    """
    x, n = np.asarray(numerator, np.float64), np.asarray(denominator, np.float64)
    units = x.shape[-1]
    mean_n = n.mean(axis=-1)
    ratio = x.sum(axis=-1) / n.sum(axis=-1)
    residual = x - ratio[..., None] * n
    variance = (residual**2).sum(axis=-1) / ((units - 1) * units * mean_n**2)
    return ratio, variance


def per_impression_variance(numerator: np.ndarray, squares: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """The variance of R when every query is taken as an independent draw: s²/ΣN with s² the sample
    variance of the per-query values (wrong when units were randomised; shown for the design effect)."""
    total = np.asarray(denominator, np.float64).sum(axis=-1)
    mean = np.asarray(numerator, np.float64).sum(axis=-1) / total
    second = np.asarray(squares, np.float64).sum(axis=-1) / total
    return np.maximum(second - mean**2, 0.0) * total / (total - 1) / total


@dataclass(frozen=True)
class Comparison:
    """One metric in both arms: values, the difference (treatment − control), its 95 % interval and p-value."""

    control: float
    treatment: float
    difference: float
    se: float
    ci: tuple[float, float]
    p_value: float
    relative: float  # difference / control
    relative_ci: tuple[float, float]
    per_impression_ci: tuple[float, float]  # what treating queries as independent would claim
    design_effect: float  # unit-level variance / per-impression variance

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("ci", "relative_ci", "per_impression_ci"):
            out[key] = list(out[key])
        return out


def difference_test(
    control: tuple[ArrayLike, ArrayLike], treatment: tuple[ArrayLike, ArrayLike]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(Δ, se, p)`` from each arm's ``(ratio, variance)``: a two-sided z-test of Δ = R_t − R_c."""
    from scipy.stats import norm

    difference = np.asarray(treatment[0], np.float64) - np.asarray(control[0], np.float64)
    se = np.sqrt(np.asarray(treatment[1], np.float64) + np.asarray(control[1], np.float64))
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * norm.sf(np.abs(difference) / se)
    return difference, se, np.where(se > 0, p, np.where(difference == 0, 1.0, 0.0))


def compare(units: pd.DataFrame, metric: str, control: str, treatment: str) -> Comparison:
    """Compare one metric (a key of :data:`METRICS`) between two arms of a per-unit table (``AbLog.units()``)."""
    numerator, squares = METRICS[metric].numerator, METRICS[metric].squares
    arms = {}
    for arm in (control, treatment):
        part = units[units["arm"] == arm]
        if len(part) < 2:
            raise InputError(f"arm {arm!r} has {len(part)} unit(s); expected at least two to estimate a variance")
        x, n, sq = (part[c].to_numpy(np.float64) for c in (numerator, "queries", squares))
        ratio, variance = ratio_delta(x, n)
        arms[arm] = (float(ratio), float(variance), float(per_impression_variance(x, sq, n)))
    (rc, vc, ic), (rt, vt, it) = arms[control], arms[treatment]
    d, se, p = (float(v) for v in difference_test((rc, vc), (rt, vt)))
    naive = float(np.sqrt(ic + it))
    relative = d / rc if rc else float("nan")
    relative_se = float(np.sqrt(vt / rc**2 + rt**2 * vc / rc**4)) if rc else float("nan")
    return Comparison(
        control=rc,
        treatment=rt,
        difference=d,
        se=se,
        ci=(d - Z_95 * se, d + Z_95 * se),
        p_value=p,
        relative=relative,
        relative_ci=(relative - Z_95 * relative_se, relative + Z_95 * relative_se),
        per_impression_ci=(d - Z_95 * naive, d + Z_95 * naive),
        design_effect=se**2 / naive**2 if naive > 0 else float("nan"),
    )


@dataclass(frozen=True)
class Srm:
    """The sample-ratio-mismatch test: units per arm against the planned share of the treatment."""

    control_units: int
    treatment_units: int
    expected_share: float  # of the treatment
    observed_share: float
    chi2: float
    p_value: float
    mismatch: bool  # p < SRM_ALPHA: the split is broken, the comparison untrustworthy

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def srm_test(control_units: int, treatment_units: int, treatment_share: float = 0.5) -> Srm:
    """Pearson's chi-square goodness of fit (1 degree of freedom) of the units per arm to the planned split."""
    from scipy.stats import chisquare

    if not 0 < treatment_share < 1:
        raise InputError(f"treatment share {treatment_share}; expected a number between 0 and 1 (0.5: an even split)")
    total = control_units + treatment_units
    expected = [total * (1 - treatment_share), total * treatment_share]
    chi2, p = chisquare([control_units, treatment_units], f_exp=expected)
    return Srm(
        control_units,
        treatment_units,
        treatment_share,
        treatment_units / total,
        float(chi2),
        float(p),
        bool(p < SRM_ALPHA),
    )


def choose_control(arms: tuple[str, ...], control: str | None) -> tuple[str, str]:
    """``(control, treatment)``: ``control`` when given (it must be an arm of the log), else the arm named
    ``control`` (any case), else the arm that appears first in the log."""
    if control is not None:
        if control not in arms:
            raise InputError(f"--control {control!r} is not an arm of the log; its arms: {', '.join(arms)}")
        chosen = control
    else:
        named = [a for a in arms if a.lower() == "control"]
        chosen = named[0] if named else arms[0]
    return chosen, next(a for a in arms if a != chosen)


def available_metrics(log: AbLog) -> list[str]:
    """The metrics the log's columns allow (``clicked`` always; the others need their column)."""
    return [m for m, spec in METRICS.items() if spec.needs == "clicked" or spec.needs in log.has]


def analyse(log: AbLog, control: str | None = None, treatment_share: float = 0.5) -> dict[str, Any]:
    """The whole comparison as plain data (the ``abtest`` block of metrics.json, without the sequential test)."""
    control, treatment = choose_control(log.arms, control)
    units = log.units()
    counts = units.groupby("arm")["queries"].agg(["size", "sum"])
    srm = srm_test(int(counts.loc[control, "size"]), int(counts.loc[treatment, "size"]), treatment_share)
    metrics = {m: compare(units, m, control, treatment).as_dict() for m in available_metrics(log)}
    return {
        "log": log.path,
        "unit": log.unit,
        "control": control,
        "treatment": treatment,
        "units": {control: srm.control_units, treatment: srm.treatment_units},
        "queries": {arm: int(counts.loc[arm, "sum"]) for arm in (control, treatment)},
        "srm": srm.as_dict(),
        "trustworthy": not srm.mismatch,
        "metrics": metrics,
        "unavailable": {m: spec.needs for m, spec in METRICS.items() if m not in metrics},
    }


__all__ = [
    "METRICS",
    "Metric",
    "SRM_ALPHA",
    "Comparison",
    "Srm",
    "analyse",
    "available_metrics",
    "choose_control",
    "compare",
    "difference_test",
    "per_impression_variance",
    "ratio_delta",
    "srm_test",
]
