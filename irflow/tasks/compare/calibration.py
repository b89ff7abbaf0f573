"""Calibrated means: a judge's labels on many queries corrected by human labels on a few (PPI++).

Prediction-powered inference (Angelopoulos, Bates, Fannjiang, Jordan & Zrnic, "Prediction-powered
inference", Science 382, 2023) with power tuning (Angelopoulos, Duchi & Zrnic, "PPI++: Efficient
prediction-powered inference", arXiv:2311.01453, 2023), for a mean.

Per query a metric is ``Y`` under human qrels and ``Ŷ`` under the judge's. ``n`` *labelled* queries
have both (``Y``, ``Ŷ``); ``N`` *unlabelled* queries have ``Ŷ`` only (``Ŷᵘ``). With a tuning weight λ::

    θ̂_λ = λ · mean(Ŷᵘ) + mean(Y − λ·Ŷ)

is unbiased for the mean of ``Y`` for any fixed λ (the second term corrects the judge's bias, measured
where both exist). Its standard error (population standard deviations, ddof = 0, as ``ppi_py``)::

    se² = λ² · var(Ŷᵘ) / N + var(Y − λ·Ŷ) / n

and the 1 − α interval is θ̂ ± z_{1−α/2} · se. λ = 0 is the classical mean of the human labels alone;
λ = 1 is plain PPI. Power tuning picks the λ that minimises se² (PPI++ eq. for the mean, clipped to
[0, 1])::

    λ̂ = cov(Y, Ŷ) / ((1 + n/N) · var(Ŷ ∪ Ŷᵘ))

with ``cov`` over the labelled queries (ddof = 0) and ``var`` over all judge values (ddof = 1), exactly
as ``ppi_py.ppi_mean_ci(..., lam=None)``. A useless judge gets λ ≈ 0 and the interval of the human
labels alone; a good one shrinks the interval towards the judge-only width, without its bias.

How many human labels: at a target half-width ``h``, with the residual variance ``var(Y − λ·Ŷ)`` seen
so far, the labelled queries needed are ``n = ⌈z² · var(Y − λ·Ŷ) / (h² − z² · λ² · var(Ŷᵘ)/N)⌉``
(none suffice when the judge term alone is wider than ``h``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import pandas as pd
from scipy import stats

from irflow.tasks.core.schema import InputError

Values: TypeAlias = Sequence[float] | np.ndarray

__all__ = ["Calibrated", "calibrate_systems", "calibrated_mean", "labels_needed", "power_tuning"]


@dataclass(frozen=True)
class Calibrated:
    """A PPI++ estimate of a mean: ``estimate`` and its ``ci``; ``judge_only`` (mean of every judge value,
    labelled and unlabelled) for comparison; ``residual_var`` = var(Y − λ·Ŷ), what more labels would shrink."""

    estimate: float
    ci: tuple[float, float]
    judge_only: float
    n_human: int
    n_judge_only: int
    lam: float
    se: float
    residual_var: float
    judge_var: float


def _arrays(y: Values, yhat: Values, yhat_unlabelled: Values) -> tuple[np.ndarray, ...]:
    arrays = tuple(np.asarray(a, dtype=np.float64).ravel() for a in (y, yhat, yhat_unlabelled))
    labelled, judged, unlabelled = arrays
    if labelled.size != judged.size:
        raise InputError(f"human and judge values must pair up: {labelled.size} human, {judged.size} judge values")
    if labelled.size < 2:
        raise InputError(f"calibration needs at least 2 human-labelled queries, got {labelled.size}")
    if unlabelled.size < 1:
        raise InputError("calibration needs at least 1 judge-only query")
    if any(not np.isfinite(a).all() for a in arrays):
        raise InputError("calibration values must be finite numbers (a NaN metric is not a 0)")
    return arrays


def power_tuning(y: Values, yhat: Values, yhat_unlabelled: Values) -> float:
    """PPI++'s variance-minimising λ for a mean, clipped to [0, 1]; 0 when the judge's values never vary
    (a constant judge carries no information about the differences between queries)."""
    labelled, judged, unlabelled = _arrays(y, yhat, yhat_unlabelled)
    n, big_n = labelled.size, unlabelled.size
    cov = float(np.mean((labelled - labelled.mean()) * (judged - judged.mean())))
    var = float(np.var(np.concatenate([judged, unlabelled]), ddof=1))
    if var == 0.0:
        return 0.0
    return float(np.clip(cov / ((1.0 + n / big_n) * var), 0.0, 1.0))


def calibrated_mean(
    y: Values,
    yhat: Values,
    yhat_unlabelled: Values,
    *,
    alpha: float = 0.05,
    lam: float | None = None,
) -> Calibrated:
    """The PPI++ estimate of the mean of ``y`` and its two-sided 1 − ``alpha`` interval (see the module
    docstring); ``lam=None`` tunes λ, a number fixes it (0: human labels only, 1: plain PPI)."""
    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    labelled, judged, unlabelled = _arrays(y, yhat, yhat_unlabelled)
    weight = power_tuning(labelled, judged, unlabelled) if lam is None else float(lam)
    residual = labelled - weight * judged
    estimate = weight * float(unlabelled.mean()) + float(residual.mean())
    judge_var, residual_var = float(np.var(unlabelled)), float(np.var(residual))
    se = math.sqrt(weight**2 * judge_var / unlabelled.size + residual_var / labelled.size)
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    return Calibrated(
        estimate=estimate,
        ci=(estimate - z * se, estimate + z * se),
        judge_only=float(np.concatenate([judged, unlabelled]).mean()),
        n_human=int(labelled.size),
        n_judge_only=int(unlabelled.size),
        lam=weight,
        se=se,
        residual_var=residual_var,
        judge_var=judge_var,
    )


def labels_needed(result: Calibrated, half_width: float, *, alpha: float = 0.05) -> int | None:
    """Human-labelled queries needed for a 1 − ``alpha`` interval of ± ``half_width``, from ``result``'s
    residual variance, λ and judge-only queries; None when the judge term alone is already wider."""
    if not half_width > 0.0:
        raise InputError(f"the target half-width must be > 0, got {half_width!r}")
    z2 = float(stats.norm.ppf(1.0 - alpha / 2.0)) ** 2
    room = half_width**2 - z2 * result.lam**2 * result.judge_var / result.n_judge_only
    if room <= 0.0:
        return None
    return max(2, math.ceil(z2 * result.residual_var / room))


def _conclusion(low: float, high: float) -> str:
    """What an interval of a difference says: ``better``, ``worse`` or ``no difference`` (it holds 0)."""
    return "better" if low > 0 else "worse" if high < 0 else "no difference"


def _block(result: Calibrated, half_width: float, alpha: float) -> dict[str, Any]:
    return {
        "estimate": result.estimate,
        "ci": [result.ci[0], result.ci[1]],
        "judge_only": result.judge_only,
        "n_human": result.n_human,
        "n_judge_only": result.n_judge_only,
        "lambda": result.lam,
        "labels_needed": labels_needed(result, half_width, alpha=alpha),
    }


def calibrate_systems(
    judge: pd.DataFrame,
    human: pd.DataFrame,
    baseline: str | None = None,
    *,
    half_width: float = 0.02,
    alpha: float = 0.05,
) -> tuple[dict[str, dict[str, dict[str, Any]]], list[str]]:
    """PPI++ for every system and metric of two long per-query tables (``system``, ``query_id``,
    ``metric``, ``value``): ``judge`` under the judge's qrels (every query), ``human`` under human qrels
    (the queries humans judged). Labelled: the queries in both; unlabelled: the judge's others.

    Returns ``{system: {metric: block}}``, each block with ``estimate``, ``ci``, ``judge_only``,
    ``n_human``, ``n_judge_only``, ``lambda`` and ``labels_needed`` (for ± ``half_width``), and for every
    system but ``baseline`` a ``difference`` block (the same, of the paired per-query difference
    system − baseline, with ``judge_only_ci`` and both conclusions); and the notes where the calibrated
    and the judge-only conclusions differ."""
    judged, labelled = _wide(judge), _wide(human)
    shared = labelled.index.intersection(judged.index)
    if len(shared) < 2:
        raise InputError(
            f"calibration needs at least 2 queries judged by both the judge and humans, got {len(shared)} "
            f"({len(labelled.index.get_level_values('query_id').unique())} human-judged queries)"
        )
    z = float(stats.norm.ppf(1.0 - alpha / 2.0))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    notes: list[str] = []
    for system, metric in judged.columns:
        if (system, metric) not in labelled.columns:
            continue
        y, yhat = labelled.loc[shared, (system, metric)], judged.loc[shared, (system, metric)]
        rest = judged.loc[judged.index.difference(shared), (system, metric)]
        block = _block(calibrated_mean(y, yhat, rest, alpha=alpha), half_width, alpha)
        if baseline is not None and system != baseline and (baseline, metric) in labelled.columns:
            dy = y - labelled.loc[shared, (baseline, metric)]
            dyhat = yhat - judged.loc[shared, (baseline, metric)]
            drest = rest - judged.loc[rest.index, (baseline, metric)]
            diff = _block(calibrated_mean(dy, dyhat, drest, alpha=alpha), half_width, alpha)
            every = np.concatenate([dyhat.to_numpy(), drest.to_numpy()])
            spread = z * float(np.std(every, ddof=1)) / math.sqrt(every.size) if every.size > 1 else math.inf
            judge_ci = [float(every.mean()) - spread, float(every.mean()) + spread]
            diff["judge_only_ci"] = judge_ci
            diff["conclusion"] = _conclusion(*diff["ci"])
            diff["judge_only_conclusion"] = _conclusion(*judge_ci)
            if diff["conclusion"] != diff["judge_only_conclusion"]:
                low, high = diff["ci"]
                notes.append(
                    f"{metric}, {system} against {baseline}: the judge alone says {diff['judge_only_conclusion']} "
                    f"({diff['judge_only']:+.4f}), calibrated by {diff['n_human']} human-judged queries "
                    f"{diff['conclusion']} ({diff['estimate']:+.4f}, {1 - alpha:.0%} CI {low:+.4f} to {high:+.4f})"
                )
            block["difference"] = diff
        out.setdefault(system, {})[metric] = block
    return out, notes


def _wide(table: pd.DataFrame) -> pd.DataFrame:
    """Long per-query values as queries × (system, metric); a query a system did not score is 0 (trec_eval -c)."""
    wide = table.pivot_table(index="query_id", columns=["system", "metric"], values="value", aggfunc="first")
    return wide.fillna(0.0)
