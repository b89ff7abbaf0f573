"""report.md's line under the Summary: the smallest difference the evaluation set detects
(:mod:`irflow.tasks.compare.power`; ``irflow power RESULT`` gives the queries needed for any difference)."""

from __future__ import annotations

from irflow.tasks.compare.power import POWER, set_power
from irflow.tasks.report.data import ReportData
from irflow.tasks.report.format import num, signed


def nothing_to_compare(system: str, baseline: str, metric: str, mean: float, sd: float) -> str | None:
    """The sentence ``irflow power`` and ``Power.verdict`` say for a candidate whose per-query differences
    do not vary (σ_Δ = 0 up to float noise: no test, no effect size, no power to speak of), else None."""
    if abs(sd) > 1e-12:
        return None
    if abs(mean) <= 1e-12:
        return f"Nothing to compare for {system}: its {metric} equals {baseline}'s on every query"
    return (
        f"Nothing to compare for {system}: its {metric} differs from {baseline}'s by exactly {signed(mean)} on "
        "every query (σ_Δ = 0), a difference no test is needed for"
    )


def only_system(baseline: str, metric: str) -> str:
    """What ``irflow power`` says of a result with one system."""
    return f"Nothing to compare: {baseline} is the only system with {metric} values."


def power_note(data: ReportData) -> list[str]:
    """One paragraph: per candidate, the difference in the headline metric that these queries detect against
    the baseline with 80 % power (two-sided paired t-test at the report's α); nothing with one system."""
    alpha = float(data.options.get("alpha", 0.05))
    parts = []
    for system in data.systems:
        if system == data.baseline:
            continue
        d = (data.wide[system] - data.wide[data.baseline]).dropna().to_numpy()
        if len(d) >= 2:
            found = set_power(d, alpha=alpha)
            parts.append(f"{data.labels[system]} ±{num(found.minimum_detectable_difference)}")
    if not parts:
        return []
    return [
        f"Minimum detectable difference: with these {len(data.wide)} queries a true difference in {data.headline} "
        f"of {', '.join(parts)} from the baseline is found with {POWER:.0%} power (two-sided paired t-test, "
        f"α = {alpha}); smaller ones are likely missed (`irflow power` gives the queries a smaller one needs).",
        "",
    ]


__all__ = ["power_note"]
