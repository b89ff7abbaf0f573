"""The power of an evaluation set: how many queries a paired comparison needs, and what it can detect.

Queries are the unit: for per-query differences Δ_i = candidate − baseline, a two-sided paired t-test
at level α detects a true mean difference δ with power

    1 − β(n, δ) = P(|T| > t_{1−α/2, n−1}),   T ~ noncentral t(df = n − 1, nc = (δ / σ_Δ) · √n)

(Cohen 1988, ch. 2; the same formula as statsmodels' ``TTestPower``, both tails counted). From it:
:func:`queries_needed` (the smallest n with power ≥ 1 − β), :func:`minimum_detectable_difference`
(the δ the current n detects with that power) and :func:`resampled_power` (the same power by
simulation: n differences drawn with replacement from the observed ones, shifted to mean δ, tested
with the t-test), the check of the approximation on the data's own shape (Sakai, "Statistical power
analysis", 2016, in IR evaluation).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import InputError

ALPHA = 0.05
POWER = 0.8
MAX_QUERIES = 10_000_000
_RESAMPLE_CELLS = 4_000_000  # differences drawn at once by resampled_power (32 MB)
RESAMPLE_LIMIT = 50_000  # set_power checks the t approximation by resampling up to this many queries


def t_power(effect: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided one-sample (paired) t-test with ``n`` pairs at standardised effect
    ``effect`` = δ / σ_Δ (d_z)."""
    from scipy import stats

    if n < 2:
        return 0.0
    df = n - 1
    crit = stats.t.ppf(1 - alpha / 2, df)
    nc = abs(effect) * math.sqrt(n)
    value = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if not math.isfinite(value):  # scipy's noncentral t gives up far in the tail: the normal limit there
        value = float(stats.norm.sf(crit - nc) + stats.norm.cdf(-crit - nc))
    return value


def queries_needed(effect: float, alpha: float = ALPHA, power: float = POWER) -> int | None:
    """The smallest number of queries whose paired t-test detects ``effect`` (d_z) with ``power``;
    None when not even :data:`MAX_QUERIES` would (an effect of 0)."""
    _check_levels(alpha, power)
    if effect == 0 or t_power(effect, MAX_QUERIES, alpha) < power:
        return None
    low, high = 2, 2
    while t_power(effect, high, alpha) < power:  # doubling, then bisection: power grows with n
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if t_power(effect, mid, alpha) < power else (low, mid)
    return high if t_power(effect, low, alpha) < power else low


def minimum_detectable_effect(n: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The standardised effect d_z that ``n`` queries detect with ``power`` (two-sided paired t-test)."""
    from scipy.optimize import brentq

    _check_levels(alpha, power)
    if n < 2:
        raise InputError(f"a paired t-test needs at least 2 queries, got {n}")
    high = 1.0
    while t_power(high, n, alpha) < power:
        high *= 2
    return float(brentq(lambda d: t_power(d, n, alpha) - power, 0.0, high, xtol=1e-10))


def resampled_power(
    differences: np.ndarray,
    n: int,
    delta: float,
    *,
    alpha: float = ALPHA,
    resamples: int = 2000,
    seed: int = 0,
) -> float:
    """Power by simulation: ``resamples`` sets of ``n`` differences drawn with replacement from
    ``differences`` shifted to mean ``delta``, each tested with the two-sided paired t-test."""
    from scipy import stats

    d = np.asarray(differences, dtype=np.float64)
    shifted = d - d.mean() + delta
    rng = np.random.default_rng(seed)
    chunk = max(1, _RESAMPLE_CELLS // n)  # bounded memory: a large n is drawn a few sets at a time
    significant = 0
    for start in range(0, resamples, chunk):
        draws = rng.choice(shifted, size=(min(chunk, resamples - start), n))
        significant += int(np.sum(np.nan_to_num(stats.ttest_1samp(draws, 0.0, axis=1).pvalue, nan=1.0) < alpha))
    return significant / resamples


def resampled_queries_needed(
    differences: np.ndarray,
    delta: float,
    *,
    alpha: float = ALPHA,
    power: float = POWER,
    resamples: int = 2000,
    seed: int = 0,
    start: int | None = None,
) -> int | None:
    """The smallest n whose :func:`resampled_power` reaches ``power`` (bisection from ``start``, the t
    approximation's answer by default; the same seed at every n, so the curve is monotone in practice)."""
    sd = float(np.std(differences, ddof=1))
    guess = start or (queries_needed(delta / sd, alpha, power) if sd > 0 else None)
    if guess is None:
        return None

    def enough(n: int) -> bool:
        return resampled_power(differences, n, delta, alpha=alpha, resamples=resamples, seed=seed) >= power

    low, high = max(2, guess // 2), guess
    while not enough(high):
        low, high = high, high * 2
        if high > MAX_QUERIES:
            return None
    while low > 2 and enough(low):
        low, high = max(2, low // 2), low
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if not enough(mid) else (low, mid)
    return high


@dataclass(frozen=True)
class SetPower:
    """What one paired comparison's queries can detect (one candidate against the baseline, one metric)."""

    queries: int
    mean_difference: float
    sd_difference: float
    effect: float  # d_z of the observed difference
    minimum_detectable_difference: float  # in metric units, with the current queries
    delta: float  # the difference asked about (default: the observed one)
    queries_needed: int | None  # for ``delta``, t approximation
    queries_needed_resampled: int | None  # for ``delta``, by resampling (None when not checked)
    power_now: float  # of the current set for ``delta``
    alpha: float
    power: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def set_power(
    differences: np.ndarray,
    delta: float | None = None,
    *,
    alpha: float = ALPHA,
    power: float = POWER,
    resamples: int = 0,
    seed: int = 0,
) -> SetPower:
    """The power figures of paired per-query ``differences`` for ``delta`` (default: their mean);
    ``resamples`` > 0 also checks the queries needed by resampling (up to :data:`RESAMPLE_LIMIT` queries:
    beyond, the t approximation is all the more exact and the simulation slow)."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[np.isfinite(d)]
    if len(d) < 2:
        raise InputError(f"power needs the paired differences of at least 2 queries, got {len(d)}")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    delta = mean if delta is None else float(delta)
    effect = delta / sd if sd > 0 else (math.inf if delta else 0.0)
    mde = minimum_detectable_effect(len(d), alpha, power) * sd
    needed = queries_needed(effect, alpha, power) if math.isfinite(effect) else (2 if effect else None)
    checked = (
        resampled_queries_needed(d, delta, alpha=alpha, power=power, resamples=resamples, seed=seed, start=needed)
        if resamples > 0 and sd > 0 and delta != 0 and needed is not None and needed <= RESAMPLE_LIMIT
        else None
    )
    now = t_power(effect, len(d), alpha) if math.isfinite(effect) else float(effect != 0)
    return SetPower(len(d), mean, sd, mean / sd if sd > 0 else 0.0, mde, delta, needed, checked, now, alpha, power)


def power_table(
    per_query: pd.DataFrame,
    metric: str,
    baseline: str,
    delta: float | None = None,
    *,
    alpha: float = ALPHA,
    power: float = POWER,
    resamples: int = 0,
    seed: int = 0,
) -> dict[str, SetPower]:
    """:func:`set_power` of every other system against ``baseline`` on ``metric``, from a per-query table
    (``system, query_id, metric, value``; the queries both systems have)."""
    rows = per_query[per_query["metric"] == metric]
    if rows.empty:
        raise InputError(f"no per-query values of {metric!r}; the table has {sorted(per_query['metric'].unique())}")
    wide = rows.pivot_table(index="query_id", columns="system", values="value", aggfunc="first")
    if baseline not in wide.columns:
        raise InputError(f"baseline {baseline!r} is not among the systems {sorted(wide.columns)}")
    return {
        str(system): set_power(
            (wide[system] - wide[baseline]).dropna().to_numpy(),
            delta,
            alpha=alpha,
            power=power,
            resamples=resamples,
            seed=seed,
        )
        for system in wide.columns
        if system != baseline
    }


def _check_levels(alpha: float, power: float) -> None:
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise InputError(f"alpha and power must lie in (0, 1), got alpha={alpha}, power={power}")


__all__ = [
    "ALPHA",
    "POWER",
    "RESAMPLE_LIMIT",
    "SetPower",
    "minimum_detectable_effect",
    "power_table",
    "queries_needed",
    "resampled_power",
    "resampled_queries_needed",
    "set_power",
    "t_power",
]
