"""Recommendations: short sentences a reader can act on, derived from the report's numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from irflow.tasks.compare.family import families
from irflow.tasks.compare.significance import format_p as _p
from irflow.tasks.report.data import ReportData
from irflow.tasks.report.format import num, signed


def recommendations(document: Mapping[str, Any], data: ReportData) -> list[str]:
    """What to pick and why: the best system and whether it is significantly better, its cost, where
    each system wins, consistency, and document-type and length preferences."""
    h, base, lab = data.headline, data.baseline, data.labels
    means = {s: document["systems"][s][h] for s in data.systems}
    p95 = {s: document.get("cost", {}).get(s, {}).get("p95_ms") for s in data.systems}
    if len(data.systems) < 2:
        return [f"Only {lab[base]} was evaluated ({h} {num(means[base])}); add a second system to compare."]
    cmp_ = data.comparisons[data.comparisons["metric"] == h].set_index("candidate")
    best = max(data.systems, key=lambda s: means[s])
    out = []
    better = [s for s in data.systems[1:] if cmp_.loc[s, "significant"] and cmp_.loc[s, "delta"] > 0]
    worse = [s for s in data.systems[1:] if cmp_.loc[s, "significant"] and cmp_.loc[s, "delta"] < 0]
    if best == base:
        others = []
        for s in data.systems[1:]:
            r = cmp_.loc[s]
            slower = f", {num(p95[s] / p95[base], 1)}× the P95 latency" if p95[s] and p95[base] else ""
            others.append(
                f"{lab[s]} {signed(r.delta)} ({data.ci_label} {signed(r.ci_low)} to {signed(r.ci_high)}, adjusted p "
                f"{_p(r.p_adjusted)}, {'significantly worse' if s in worse else 'not significant'}{slower})"
            )
        out.append(
            f"Keep the baseline {lab[base]}: no system has a higher mean {h} ({num(means[base])}); "
            + "; ".join(others)
            + "."
        )
    elif best in better:
        r = cmp_.loc[best]
        out.append(
            f"Pick {lab[best]}: {h} {num(means[best])} vs {num(means[base])} for {lab[base]}, "
            f"{signed(r.delta)} ({data.ci_label} {signed(r.ci_low)} to {signed(r.ci_high)}, "
            f"adjusted p {_p(r.p_adjusted)}), "
            f"better on {r.wins} of {r.n} queries and worse on {r.losses}."
        )
    else:
        r = cmp_.loc[best]
        ci = f"{data.ci_label} {signed(r.ci_low)} to {signed(r.ci_high)}"
        why = (
            f"the {ci} includes 0"
            if r.ci_low <= 0 <= r.ci_high
            else f"unadjusted p {_p(r.p_randomization)} and the uncorrected {ci} point the same way, which is "
            "suggestive, not conclusive"
        )
        out.append(
            f"{lab[best]} has the highest mean {h} ({num(means[best])}, {signed(r.delta)} over {lab[base]}), but "
            f"the difference is not significant after correction ({_family(data)}; adjusted p "
            f"{_p(r.p_adjusted)}; {why}): on these {r.n} queries choose on cost, or add queries."
        )
    tied = [s for s in data.systems if s != best and same_value(means[s], means[best])]
    if tied:
        out.append(
            f"Tied: {', '.join(lab[s] for s in tied)} {'has' if len(tied) == 1 else 'have'} the same mean {h} as "
            f"{lab[best]} ({num(means[best])}, equal unrounded)."
        )
    if best != base and p95[best] and p95[base]:
        ratio = p95[best] / p95[base]
        out.append(
            f"Cost: {lab[best]} has a P95 latency of {num(p95[best], 1)} ms vs {num(p95[base], 1)} ms for {lab[base]} "
            f"({num(ratio, 1)}×)"
            + (f" for {signed(means[best] - means[base])} {h}" if ratio > 1 else "")
            + (
                "; as the gain is not significant, the faster baseline is the safer choice."
                if best not in better and ratio > 1
                else "."
            )
        )
    out += _segment_wins(data, best)
    spread = data.consistency.set_index("system")
    steady = min(data.systems, key=lambda s: (spread.loc[s, "std"], s))
    fails = {s: spread.loc[s, "zero_share"] for s in data.systems}
    out.append(
        f"Consistency: {lab[steady]} varies least across queries (sd {num(spread.loc[steady, 'std'], 3)}); "
        "queries scoring 0: " + ", ".join(f"{lab[s]} {fails[s]:.0%}" for s in data.systems) + "."
    )
    out += _preferences(data)
    return out


VERDICT_LEAD = "**Verdict.** "  # report.md's first paragraph starts so; :func:`read_verdict` finds it


def verdict(document: Mapping[str, Any], data: ReportData) -> str:
    """One sentence for the top of the report: the best system on the headline metric, its difference to
    the baseline with the (unadjusted) interval, and, in words, whether it holds after the correction."""
    h, base, lab = data.headline, data.baseline, data.labels
    if calibrated := _calibrated_verdict(document, data):
        return calibrated
    means = {s: document["systems"][s][h] for s in data.systems}
    if len(data.systems) < 2:
        return f"Only {lab[base]} was evaluated ({h} {num(means[base])}): nothing is compared."
    cmp_ = data.comparisons[data.comparisons["metric"] == h].set_index("candidate")
    best = max(data.systems, key=lambda s: means[s])
    family = _correction(data)
    if best == base:
        near = max(data.systems[1:], key=lambda s: means[s])
        r = cmp_.loc[near]
        held = "significantly worse" if r.significant else "not significantly different"
        return (
            f"No system beats the baseline {lab[base]} on {h} ({num(means[base])}); the closest, {lab[near]}, "
            f"is {signed(r.delta)} ({_interval(data, r)}) and {held} (adjusted p {_p(r.p_adjusted)}, {family})."
        )
    r = cmp_.loc[best]
    single = family.startswith("a single")
    if r.significant:
        held = (
            f"the gain is significant (p {_p(r.p_adjusted)}, {family})"
            if single
            else f"the gain holds after {family} (adjusted p {_p(r.p_adjusted)})"
        )
    else:
        held = (
            f"the gain is not significant (p {_p(r.p_adjusted)} ≥ {data.options['alpha']}, {family})"
            if single
            else f"the gain does not hold after {family} (adjusted p {_p(r.p_adjusted)} ≥ {data.options['alpha']})"
        ) + f": it may be chance on these {r.n} queries"
    return (
        f"{lab[best]} is best on {h}: {num(means[best])} vs {num(means[base])} for the baseline {lab[base]}, "
        f"{signed(r.delta)} ({_interval(data, r)}); {held}."
    )


def _calibrated_verdict(document: Mapping[str, Any], data: ReportData) -> str | None:
    """With human labels (``--human``): the verdict on the calibrated (PPI++) figures, the judge-only ones
    beside them; None without a calibrated headline for every system."""
    h, base, lab = data.headline, data.baseline, data.labels
    blocks = {s: ((document.get("calibrated") or {}).get(s) or {}).get(h) for s in data.systems}
    if not all(blocks.values()):
        return None
    cal: dict[str, Any] = {s: b for s, b in blocks.items() if b}

    def figure(s: str) -> str:
        b = cal[s]
        return f"{num(b['estimate'])} [{num(b['ci'][0])}, {num(b['ci'][1])}] (judge only {num(b['judge_only'])})"

    if len(data.systems) < 2:
        return f"Only {lab[base]} was evaluated ({h} calibrated by human labels: {figure(base)}): nothing is compared."
    best = max(data.systems, key=lambda s: cal[s]["estimate"])

    def against(s: str) -> str:
        d = cal[s].get("difference") or {}
        if not d:
            return figure(s)
        interval = f"[{signed(d['ci'][0])}, {signed(d['ci'][1])}]"
        return f"{signed(d['estimate'])} {interval}, the calibrated interval says {d['conclusion']}"

    if best == base:
        near = max(data.systems[1:], key=lambda s: cal[s]["estimate"])
        return (
            f"No system beats the baseline {lab[base]} on {h} calibrated by human labels (PPI++): {figure(base)}; "
            f"the closest, {lab[near]}, is {against(near)}."
        )
    return (
        f"{lab[best]} is best on {h} calibrated by human labels (PPI++): {figure(best)} vs {figure(base)} for the "
        f"baseline {lab[base]}, {against(best)}."
    )


def _correction(data: ReportData) -> str:
    """The headline family in a few words: "Holm correction over 2 comparisons", "a single comparison (...)"."""
    found = [f for f in families(data.comparisons) if data.headline in f.metrics]
    if not found or found[0].size < 2:
        return "a single comparison (nothing to correct)"
    return f"{found[0].method.capitalize()} correction over {found[0].size} comparisons"


def _interval(data: ReportData, r: Any) -> str:
    return f"unadjusted {data.ci_label} {signed(r.ci_low)} to {signed(r.ci_high)}"


def read_verdict(markdown: str) -> str | None:
    """The verdict sentence of a report.md's text, as plain text (None: a report without one)."""
    for line in markdown.splitlines():
        if line.startswith(VERDICT_LEAD):
            return "Verdict: " + line[len(VERDICT_LEAD) :].replace("`", "")
    return None


def _family(data: ReportData) -> str:
    """The headline's correction family, e.g. "Holm (1979) over a family of 2 comparisons (nDCG@10)"."""
    found = [f for f in families(data.comparisons) if data.headline in f.metrics]
    return found[0].describe(data.labels, list_pairs=False) if found else "no correction"


def same_value(a: float, b: float) -> bool:
    """Ties are decided on the unrounded values; only float noise (1e-12) is forgiven."""
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def two_values(a: float, b: float, digits: int = 3) -> str:
    """``a vs b`` with as many decimals (3 to 6) as it takes for different values not to print alike."""
    while digits < 6 and f"{a:.{digits}f}" == f"{b:.{digits}f}":
        digits += 1
    return f"{a:.{digits}f} vs {b:.{digits}f}"


def _segment_wins(data: ReportData, best: str) -> list[str]:
    wins, ties = [], []
    for column, table in data.segments.items():
        for _, r in table.iterrows():
            if r["queries"] < 5:
                continue
            ahead = [s for s in data.systems if r[s] > r[best] and not same_value(r[s], r[best])]
            where = f"{column} = {r[column]} ({int(r['queries'])} queries"
            if ahead:
                winner = max(ahead, key=lambda s: r[s])
                wins.append(f"{data.labels[winner]} on {where}, {two_values(r[winner], r[best])})")
            elif tied := [s for s in data.systems if s != best and same_value(r[s], r[best])]:
                ties.append(f"{where}: {', '.join(data.labels[s] for s in tied)} tied at {num(r[best], 3)})")
    out = []
    if wins:
        out.append(_listed(f"Where {data.labels[best]} is not the best ({data.headline}): ", wins))
    elif data.segments:
        out.append(f"{data.labels[best]} is also best or tied in every segment of 5 or more queries.")
    if ties:
        out.append(_listed(f"Tied with {data.labels[best]} ({data.headline}): ", ties))
    return out


def _listed(lead: str, items: list[str], most: int = 6) -> str:
    return lead + "; ".join(items[:most]) + ("; …" if len(items) > most else "") + "."


def _preferences(data: ReportData) -> list[str]:
    k, out = data.options["k"], []
    for column, table in data.shares.items():
        for s in data.systems:
            ratio = table[s] / table["relevant"].where(table["relevant"] > 0)
            over = ratio[(table[s] >= 0.05) & (ratio >= 1.3)]
            if len(over):
                i = over.idxmax()
                out.append(
                    f"{data.labels[s]} over-retrieves {column} = {table.loc[i, column]}: "
                    f"{table.loc[i, s]:.0%} of its top {k} vs {table.loc[i, 'relevant']:.0%} "
                    "of relevant documents."
                )
    if data.lengths is not None:
        lengths = data.lengths.set_index("set")
        relevant = lengths.loc["relevant", "mean_words"]
        for s in data.systems:
            mean = lengths.loc[s, "mean_words"]
            if math.isfinite(relevant) and math.isfinite(mean) and relevant > 0 and not 0.8 <= mean / relevant <= 1.25:
                kind = "longer" if mean > relevant else "shorter"
                out.append(
                    f"{data.labels[s]} favours {kind} documents: {num(mean, 0)} words on average in its top {k} "
                    f"vs {num(relevant, 0)} among relevant documents."
                )
    return out


def recommendations_section(document: Mapping[str, Any], data: ReportData) -> list[str]:
    return ["## Recommendations", "", *(f"- {line}" for line in recommendations(document, data)), ""]


# ---------------------------------------------------------------------------------------------
