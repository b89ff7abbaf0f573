"""Always-valid p-values for an A/B test read day by day: the mixture sequential probability ratio test.

Looking at a fixed-horizon p-value every day and stopping at the first p < 0.05 rejects a true null far
more often than 5 % of the time. The mSPRT (Johari, Koomen, Pekelis and Walsh, "Peeking at A/B tests",
KDD 2017; "Always valid inference", Operations Research 2022) mixes the likelihood ratio of the
difference estimate Δ̂ (approximately normal with variance V, here the delta-method variance of the
log so far) over effects θ ~ N(0, τ²):

    Λ = sqrt(V / (V + τ²)) · exp(τ² Δ̂² / (2 V (V + τ²)))

and the always-valid p-value after day d is ``p_d = min(p_{d−1}, 1/Λ_d)``, ``p_0 = 1``: P(p_d ≤ α for
some d) ≤ α under the null, however often it is looked at. τ is the spread of the effects one expects,
in the metric's units (a τ near the true effect gives the most power).

What the log needs: a ``day`` column (a date or a day number) or a ``timestamp`` (its UTC date).
"""

from __future__ import annotations

from contextlib import closing
from typing import Any

import numpy as np

from irflow.tasks.core.schema import InputError
from irflow.tasks.online.abtest import METRICS, difference_test, ratio_delta
from irflow.tasks.online.abtest_days import log_days
from irflow.tasks.online.abtest_log import FLOATS, AbLog

DEFAULT_TAU = 0.01


def msprt_p_values(difference: np.ndarray, variance: np.ndarray, tau: float) -> np.ndarray:
    """Always-valid p-values along the last axis (looks in order) from each look's Δ̂ and its variance V."""
    if not tau > 0:
        raise InputError(f"mSPRT tau {tau}; expected a positive number (the spread of expected effects)")
    d, v = np.asarray(difference, np.float64), np.asarray(variance, np.float64)
    t2 = tau * tau
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_lr = 0.5 * np.log(v / (v + t2)) + t2 * d * d / (2 * v * (v + t2))
    log_lr = np.where(v > 0, log_lr, 0.0)  # no variance yet (one unit per arm): no evidence
    return np.minimum.accumulate(np.minimum(1.0, np.exp(-log_lr)), axis=-1)


def sequential(
    log: AbLog, control: str, treatment: str, metrics: list[str], tau: float = DEFAULT_TAU
) -> dict[str, Any]:
    """Per day (cumulative): each metric's difference, its fixed-horizon p-value and the always-valid p-value.

    Each unit's sums are carried from day to day (one pass over the log spilled day by day, then per day one
    pass over the units: see :mod:`~irflow.tasks.online.abtest_days`); a day before both arms have two units
    gives no look.
    """
    from irflow.tasks.core.progress import Progress

    days = log.days()
    arm_of = log.sums["arm"].to_numpy()
    columns = ["queries", *dict.fromkeys(METRICS[m].numerator for m in metrics)]
    totals = {c: np.zeros(len(arm_of)) for c in columns}
    looks: dict[str, dict[str, list[float]]] = {m: {"difference": [], "variance": [], "p_value": []} for m in metrics}
    used_days = []
    with Progress("sequential test", len(days), unit="days") as progress, closing(log_days(log)) as each_day:
        for today in each_day:
            for column in columns:
                if column in FLOATS:  # added click by click in the log's order, as from one read
                    np.add.at(totals[column], today.clickers, today.rr if column == "rr" else today.rr**2)
                else:
                    totals[column] += today.counts[column].astype(np.float64)  # exact: integers
            progress.advance(1)
            seen = totals["queries"] > 0
            masks = [seen & (arm_of == arm) for arm in (control, treatment)]
            if min(int(m.sum()) for m in masks) < 2:  # no variance yet
                continue
            used_days.append(today.day)
            for metric in metrics:
                numerator = totals[METRICS[metric].numerator]
                c, t = (ratio_delta(numerator[m], totals["queries"][m]) for m in masks)
                d, se, p = difference_test(c, t)
                looks[metric]["difference"].append(float(d))
                looks[metric]["variance"].append(float(se) ** 2)
                looks[metric]["p_value"].append(float(p))
    out: dict[str, Any] = {"tau": tau, "days": [str(d) for d in used_days], "metrics": {}}
    for metric, values in looks.items():
        always = msprt_p_values(np.array(values["difference"]), np.array(values["variance"]), tau)
        out["metrics"][metric] = {
            "difference": values["difference"],
            "p_value": values["p_value"],  # fixed-horizon, valid only at a horizon fixed in advance
            "always_valid_p_value": always.tolist(),
            "final_always_valid_p_value": float(always[-1]) if always.size else 1.0,
        }
    return out


__all__ = ["DEFAULT_TAU", "msprt_p_values", "sequential"]
