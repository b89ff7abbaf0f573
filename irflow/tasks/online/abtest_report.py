"""An A/B test's result folder: metrics.json, report.md and report.html (the report package's page style).

A sample-ratio mismatch is the report's first line, and every comparison under it is marked untrustworthy.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from irflow.tasks.core.atomic import atomic_open, write_json
from irflow.tasks.core.config import irflow_version
from irflow.tasks.online.abtest import METRICS
from irflow.tasks.report.format import format_p, md_table, num, signed
from irflow.tasks.report.html import html_report
from irflow.tasks.report.recommendations import VERDICT_LEAD


def _interval(ci: list[float], digits: int = 4) -> str:
    return f"[{signed(ci[0], digits)}, {signed(ci[1], digits)}]"


def _srm_lines(ab: Mapping[str, Any]) -> list[str]:
    srm, unit = ab["srm"], ab["unit"]
    counts = f"{srm['control_units']:,} units ({unit}) in {ab['control']}"
    counts += f", {srm['treatment_units']:,} in {ab['treatment']}"
    share = f"treatment share {num(srm['observed_share'])}, planned {num(srm['expected_share'])}"
    if srm["mismatch"]:
        return [
            f"> **Sample-ratio mismatch (chi-square p = {srm['p_value']:.2g} < 0.001): the comparison below is "
            f"untrustworthy.** {counts} ({share}). The split did not work as planned (a bug in assignment, "
            "logging or filtering); find the cause before reading any difference.",
            "",
        ]
    return [f"Sample ratio: {counts} ({share}); chi-square p = {format_p(srm['p_value'])}, no mismatch.", ""]


PRIMARY = "ctr"  # the A/B verdict's metric: clicks per query shown


def abtest_verdict(document: Mapping[str, Any]) -> str:
    """One sentence: which arm wins on the primary metric (ctr) and whether the sample-ratio check makes it
    untrustworthy: the first line of report.md, the last of the terminal (``ABTest.verdict`` says it)."""
    ab = document["abtest"]
    m, srm = ab["metrics"][PRIMARY], ab["srm"]
    figures = (
        f"{PRIMARY} {num(m['control'])} -> {num(m['treatment'])}, difference {signed(m['difference'])} "
        f"{_interval(m['ci'])}, p = {m['p_value']:.3g}"
    )
    if m["p_value"] < 0.05 and m["difference"] != 0:
        winner = f"{ab['treatment']} (treatment)" if m["difference"] > 0 else f"{ab['control']} (control)"
        said = f"{winner} wins on {PRIMARY} ({figures})"
    else:
        said = f"Neither arm ({ab['control']}, {ab['treatment']}) wins on {PRIMARY} at α = 0.05 ({figures})"
    if srm["mismatch"]:
        return (
            f"{said}, but a sample-ratio mismatch (p = {srm['p_value']:.3g}, {int(srm['control_units']):,} vs "
            f"{int(srm['treatment_units']):,} units) makes the comparison untrustworthy."
        )
    return f"{said}; the sample ratio is as planned (p = {srm['p_value']:.3g})."


def markdown(document: Mapping[str, Any]) -> str:
    """report.md of an A/B test (``document``: metrics.json): the verdict first."""
    ab = document["abtest"]
    lines = [f"# A/B test: {Path(ab['log']).name}", "", VERDICT_LEAD + abtest_verdict(document), ""]
    lines += _srm_lines(ab)
    queries = ", ".join(f"{arm} {n:,}" for arm, n in ab["queries"].items())
    lines += [
        f"Control **{ab['control']}**, treatment **{ab['treatment']}**; randomised by `{ab['unit']}`; "
        f"queries shown: {queries}.",
        "",
        "## Metrics",
        "",
    ]
    if not ab["trustworthy"]:
        lines += ["*Untrustworthy: sample-ratio mismatch (see above).*", ""]
    rows = []
    for name, m in ab["metrics"].items():
        rows.append(
            [
                name,
                num(m["control"]),
                num(m["treatment"]),
                signed(m["difference"]),
                _interval(m["ci"]),
                format_p(m["p_value"]),
                f"{m['relative']:+.2%}",
                _interval(m["per_impression_ci"]),
                f"{num(m['design_effect'], 2)}",
            ]
        )
    lines += md_table(
        [
            "metric",
            ab["control"],
            ab["treatment"],
            "Δ (treatment − control)",
            f"95% CI (per {ab['unit']})",
            "p",
            "relative Δ",
            "per-query CI (wrong)",
            "design effect",
        ],
        rows,
        "lrrrrrrrr",
    )
    lines += [
        "",
        f"Intervals and p-values are computed at the randomisation unit ({ab['unit']}): each metric is a ratio "
        f"of sums per {ab['unit']}, its variance by the delta method (Deng, Lu and Litz, KDD 2018). The per-query "
        "interval treats every query as independent and is too narrow by the square root of the design effect; "
        "it is shown only to make that visible.",
        "",
    ]
    lines += [f"* `{m}`: {METRICS[m].meaning}" for m in ab["metrics"]]
    lines += [f"* `{m}`: not computed, the log has no `{needs}` column" for m, needs in ab["unavailable"].items()]
    lines.append("")
    lines += _sequential_lines(document.get("sequential"))
    return "\n".join(lines)


def _sequential_lines(seq: Mapping[str, Any] | None) -> list[str]:
    if not seq:
        return []
    lines = [
        "## Sequential test (mSPRT)",
        "",
        f"The log read day by day (cumulative); always-valid p-values (Johari et al. 2017/2022, τ = {seq['tau']:g}) "
        "may be checked every day, the daily fixed-horizon p-values may not.",
        "",
    ]
    for metric, values in seq["metrics"].items():
        peeks = sum(p < 0.05 for p in values["p_value"])
        lines += [f"**{metric}**: final always-valid p = {format_p(values['final_always_valid_p_value'])}"]
        if peeks:
            lines[-1] += f" (the fixed-horizon p was below 0.05 on {peeks} of {len(values['p_value'])} days)"
        lines += [""]
        lines += md_table(
            ["day", "Δ", "fixed-horizon p", "always-valid p"],
            [
                [day, signed(d), format_p(p), format_p(a)]
                for day, d, p, a in zip(
                    seq["days"], values["difference"], values["p_value"], values["always_valid_p_value"], strict=True
                )
            ],
            "lrrr",
        )
        lines.append("")
    return lines


def write_abtest(
    folder: str | Path, analysis: Mapping[str, Any], sequential: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Write metrics.json, report.md and report.html into ``folder`` (each atomically); returns the document."""
    folder = Path(folder)
    document: dict[str, Any] = {"abtest": dict(analysis), "irflow_version": irflow_version()}
    if sequential:
        document["sequential"] = dict(sequential)
    text = markdown(document)
    write_json(folder / "metrics.json", document)
    with atomic_open(folder / "report.md", "w", encoding="utf-8") as fh:
        fh.write(text)
    # the page's title names its "dataset": here the log and the unit
    page = {"dataset": {"name": f"A/B test {Path(analysis['log']).name}", "split": f"by {analysis['unit']}"}}
    with atomic_open(folder / "report.html", "w", encoding="utf-8") as fh:
        fh.write(html_report(page, text, {}))
    return document


__all__ = ["PRIMARY", "abtest_verdict", "markdown", "write_abtest"]
