"""report.md's Summary and Significance sections: each comparison with the baseline, and the family
its multiple-comparison correction runs over (:mod:`irflow.tasks.compare.family`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from irflow.tasks.compare.family import families
from irflow.tasks.report.coverage import COVERAGE_MEASURE, coverage_notes, shown_coverage
from irflow.tasks.report.data import ReportData
from irflow.tasks.report.format import format_p, img, mark, md_table, ms, num, signed


def family_sentence(data: ReportData) -> str:
    """The family the adjusted p-values of the comparisons with the baseline were corrected over: which
    comparisons, how many, which method (each metric is a family of its own)."""
    found = families(data.comparisons)
    if not found:
        return "Only one system: nothing is compared, so nothing is corrected."
    headline = next((f for f in found if data.headline in f.metrics), found[0])
    text = f"Adjusted p: {headline.describe(data.labels)}"
    if len(found) > 1:
        text += f"; each of the other {len(found) - 1} metrics is a family of its own, of the same pairs"
    return text + "."


def _family_note(data: ReportData) -> str:
    o = data.options
    if len(data.systems) < 2:
        return family_sentence(data)
    return (
        f"Δ = system − baseline, per query, averaged; p = two-sided Fisher randomization test "
        f"({o['permutations']:,} sign flips, seed {o['seed']}); ▲/▼ = significantly better/worse than the "
        f"baseline at α = {o['alpha']} after correction, - = not; intervals are unadjusted. {family_sentence(data)}"
    )


def disagrees(row: Any) -> bool:
    """The row's unadjusted interval and its corrected test say different things (one excludes 0, the
    other is not significant, or the other way round)."""
    excludes = row.ci_low > 0 or row.ci_high < 0
    return bool(excludes) != bool(row.significant)


def _disagreement_note(data: ReportData, rows: list[Any]) -> list[str]:
    """Explains each † of the summary: why an interval and its adjusted p may not agree."""
    odd = [r for r in rows if disagrees(r)]
    if not odd:
        return []
    alpha, text = data.options["alpha"], "† The interval and the adjusted p disagree: "
    if any(not r.significant for r in odd):
        text += (
            f"the {data.ci_label} is unadjusted (one comparison on its own) while the p-value is corrected over "
            f"the family above, so an interval that excludes 0 can sit beside an adjusted p ≥ {alpha}: the "
            "difference does not hold after correction. "
        )
    if any(r.significant for r in odd):
        text += (
            "an interval that includes 0 beside a significant adjusted p means the bootstrap interval and the "
            "randomization test differ at the edge: read it as borderline."
        )
    return [text.rstrip(), ""]


def summary_section(document: Mapping[str, Any], data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    h, cmp_ = data.headline, data.comparisons.set_index(["metric", "candidate"])
    means = document["systems"]
    costs = document.get("cost", {})
    judged = shown_coverage(document)
    rows = []
    for s in data.systems:
        cost = ms(costs.get(s, {}), "p95_ms")
        beside = [f"{judged.get(s, float('nan')):.0%}"] if judged is not None else []
        if s == data.baseline:
            rows.append([f"{data.labels[s]} (baseline)", num(means[s][h]), *beside, "-", "-", "-", "-", "-", cost])
            continue
        r = cmp_.loc[(h, s)]
        rows.append(
            [
                data.labels[s],
                num(means[s][h]),
                *beside,
                signed(r.delta),
                f"[{signed(r.ci_low)}, {signed(r.ci_high)}]" + (" †" if disagrees(r) else ""),
                format_p(r.p_adjusted),
                mark(r) or "-",
                f"{r.wins}/{r.ties}/{r.losses}",
                cost,
            ]
        )
    headers = ["system", h, *([COVERAGE_MEASURE] if judged is not None else []), "Δ vs baseline"]
    headers += [f"{data.ci_label} of Δ (unadjusted)", "p (adj.)", "sig", "W/T/L", "P95 latency ms"]
    align = "lr" + ("r" if judged is not None else "") + "rlrclr"
    lines = ["## Summary", "", _family_note(data), "", *md_table(headers, rows, align), ""]
    lines += _disagreement_note(data, [cmp_.loc[(h, s)] for s in data.systems[1:]])
    lines += coverage_notes(document, data.labels)
    grid = []
    for m in data.measures:
        cells = [m]
        for s in data.systems:
            if s == data.baseline:
                cells.append(num(means[s][m]))
            else:
                r = cmp_.loc[(m, s)]
                cells.append(f"{num(means[s][m])} ({signed(r.delta)}) {mark(r)}".rstrip())
        grid.append(cells)
    lines += [
        "All metrics (Δ vs baseline in parentheses):",
        "",
        *md_table(["metric", *(data.labels[s] for s in data.systems)], grid, "l" + "r" * len(data.systems)),
        "",
    ]
    lines += img(plot_files, "distribution", f"per-query {h}") + img(plot_files, "curves", "metric at k")
    return lines


def significance_section(data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    if len(data.systems) < 2:
        return ["## Significance", "", "Only one system: nothing to compare.", ""]
    n = int(data.comparisons["n"].iloc[0])
    lines = [
        "## Significance",
        "",
        f"Paired over the {n} queries (the unit of comparison is the query, never repeated runs of a "
        "deterministic system). Tests: paired t-test; Wilcoxon signed-rank (zero differences dropped, "
        "average ranks for ties, no continuity correction; "
        f"{_wilcoxon_methods(data)}); Fisher randomization test (Smucker, Allan & Carterette 2007), "
        f"the primary test, corrected for multiple comparisons; {data.ci_label} of the mean difference "
        f"by paired bootstrap ({data.options['bootstrap']:,} resamples, {_CI_METHODS[data.options['ci']]}); "
        "d_z = mean Δ / sd of Δ (|d_z| ≈ 0.2 small, 0.5 medium, 0.8 large; Cohen 1988). " + family_sentence(data),
        "",
    ]
    lines += _comparison_table(data, data.comparisons)
    if data.pairwise is not None:
        lines += [
            f"All pairs on {data.headline}; adjusted p: "
            + "; ".join(f.describe(data.labels) for f in families(data.pairwise))
            + ":",
            "",
            *_comparison_table(data, data.pairwise, pairs=True),
        ]
    lines += img(plot_files, "differences", f"per-query difference in {data.headline}")
    return lines


_CI_METHODS = {
    "bca": "BCa, Efron 1987, expanded for small samples as Hesterberg 2015",
    "percentile": "percentile interval",
}
_WILCOXON_METHODS = {
    "exact": "exact null distribution",
    "permutation": "exact over every sign flip (zeros or ties)",
    "normal": "normal approximation with tie-corrected variance",
}


def _wilcoxon_methods(data: ReportData) -> str:
    """Which null distribution the Wilcoxon p-values used, e.g. "here: normal approximation ..." ."""
    methods = data.comparisons["wilcoxon_method"] if "wilcoxon_method" in data.comparisons else pd.Series(dtype=str)
    counts = methods.value_counts()
    if counts.empty:
        return "scipy"
    if len(counts) == 1:
        return f"here: {_WILCOXON_METHODS.get(str(counts.index[0]), str(counts.index[0]))}"
    parts = [f"{_WILCOXON_METHODS.get(str(m), str(m))} for {n}" for m, n in counts.items()]
    return "here: " + ", ".join(parts) + f" of {int(counts.sum())} comparisons"


def _comparison_table(data: ReportData, table: pd.DataFrame, pairs: bool = False) -> list[str]:
    rows = []
    for r in table.itertuples():
        who = f"{data.labels[r.candidate]} vs {data.labels[r.baseline]}" if pairs else data.labels[r.candidate]
        rows.append(
            [
                r.metric,
                who,
                signed(r.delta),
                f"[{signed(r.ci_low)}, {signed(r.ci_high)}]",
                num(r.effect_size, 2),
                f"{r.wins}/{r.ties}/{r.losses}",
                num(r.t_stat, 2),
                format_p(r.p_ttest),
                num(r.w_stat, 1),
                format_p(r.p_wilcoxon),
                format_p(r.p_randomization),
                format_p(r.p_adjusted),
                mark(r) or "-",
            ]
        )
    return [
        *md_table(
            [
                "metric",
                "comparison" if pairs else "system",
                "Δ",
                f"{data.ci_label} (unadj.)",
                "d_z",
                "W/T/L",
                "t",
                "p (t)",
                "W",
                "p (Wilcoxon)",
                "p (rand.)",
                "p (adj.)",
                "sig",
            ],
            rows,
            "llrlrlrrrrrrc",
        ),
        "",
    ]
