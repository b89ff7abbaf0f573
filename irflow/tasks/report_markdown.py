"""report.md: the Markdown a person reads, section by section, from :class:`~irflow.tasks.report_data.ReportData`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from irflow.tasks.ingest.qrels import describe_missing_documents
from irflow.tasks.recommendations import recommendations_section
from irflow.tasks.report_data import ReportData
from irflow.tasks.significance import format_p as _p


def _num(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:.{digits}f}"


def _signed(x: float, digits: int = 4) -> str:
    return _num(x, digits) if not math.isfinite(x) else f"{x:+.{digits}f}"


def _mark(row: Any) -> str:
    return ("▲" if row.delta > 0 else "▼") if row.significant else ""


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str) -> list[str]:
    spec = {"l": "---", "r": "---:", "c": ":---:"}
    return [
        "| " + " | ".join(_cell(h) for h in headers) + " |",
        "|" + "|".join(spec[a] for a in align) + "|",
        *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows),
    ]


def _ms(cost: Mapping[str, Any], key: str) -> str:
    value = cost.get(key)
    return f"{value:.1f}" if value is not None else "-"


def _simple_report(document: Mapping[str, Any]) -> list[str]:
    """One row per system and metric means, best in bold (the report without per-query analysis)."""
    measures = document["measures"]
    systems = document["systems"]
    best = {m: max(v[m] for v in systems.values()) for m in measures} if systems else {}
    rows = [
        [
            f"`{s}`",
            *((f"**{v[m]:.4f}**" if v[m] == best[m] else f"{v[m]:.4f}") for m in measures),
            _ms(document.get("cost", {}).get(s, {}), "p95_ms"),
        ]
        for s, v in systems.items()
    ]
    return [
        *_table(["system", *measures, "p95 ms"], rows, "l" + "r" * (len(measures) + 1)),
        "",
        "Best value per metric in bold. Means over all judged queries; a query a system did not answer "
        "scores 0 (as `trec_eval -c`).",
        "",
    ]


def _header(document: Mapping[str, Any]) -> list[str]:
    ds = document["dataset"]

    def count(key: str) -> str:
        return f"{ds[key]:,}" if isinstance(ds.get(key), int) else "?"

    return [
        f"# Evaluation of {ds['name']} ({ds['split']})",
        "",
        f"{count('documents')} documents, {count('queries')} judged queries, {count('judgements')} judgements; "
        f"fingerprint `{str(ds['fingerprint'])[:16]}`; depth {document['depth']}.",
        "",
        *(
            [f"> **Note.** {describe_missing_documents(ds['missing_documents'])} (kept, as trec_eval and BEIR do).", ""]
            if ds.get("missing_documents")
            else []
        ),
    ]


def markdown_report(
    document: dict[str, Any], data: ReportData | None = None, plot_files: Mapping[str, str] | None = None
) -> str:
    """The human report. With only ``document``: the dataset and one row of means per system;
    with ``data`` (from :func:`analyse`): summary, significance, segments, disagreements,
    consistency, cost and recommendations, linking ``plot_files``."""
    if data is None:
        return "\n".join(_header(document) + _simple_report(document))
    plot_files = plot_files or {}
    lines = _header(document)
    lines += _systems_section(data)
    lines += _external_section(document, data)
    for note in data.notes:
        lines += [f"> **Note.** {note}", ""]
    lines += _summary_section(document, data, plot_files)
    lines += recommendations_section(document, data)
    lines += _significance_section(data, plot_files)
    lines += _segments_section(data, plot_files)
    lines += _documents_section(data, plot_files)
    lines += _disagreements_section(data)
    lines += _consistency_section(data, plot_files)
    lines += _cost_section(document, data, plot_files)
    return "\n".join(lines)


def _img(plot_files: Mapping[str, str], name: str, alt: str) -> list[str]:
    return [f"![{alt}]({plot_files[name]})", ""] if name in plot_files else []


def _systems_section(data: ReportData) -> list[str]:
    rows = [[data.labels[s] + (" (baseline)" if s == data.baseline else ""), f"`{s}`"] for s in data.systems]
    return ["## Systems", "", *_table(["label", "system spec"], rows, "ll"), ""]


def _external_section(document: Mapping[str, Any], data: ReportData) -> list[str]:
    """What irflow dropped from rankings made elsewhere (ids the dataset does not know), and why a run
    file has no latency."""
    costs = document.get("cost", {})
    lines = []
    for s in data.systems:
        c = costs.get(s, {})
        if c.get("dropped_hits"):
            lines.append(
                f"- {data.labels[s]}: {c['dropped_hits']:,} hits dropped — {c.get('unknown_queries', 0):,} query ids "
                f"that are not queries of this split, {c.get('unknown_documents', 0):,} document ids not in the "
                "corpus (trec_eval would keep an unknown document as not relevant at its rank)."
            )
        if c.get("queries_without_hits"):
            lines.append(
                f"- {data.labels[s]}: {c['queries_without_hits']:,} judged queries have no hit (they score 0)."
            )
        if c.get("note"):
            lines.append(f"- {data.labels[s]}: latency {c['note']}.")
    return ["## Systems built elsewhere", "", *lines, ""] if lines else []


def _family_note(data: ReportData) -> str:
    o, m = data.options, len(data.systems) - 1
    return (
        f"Δ = system − baseline, per query, averaged; p = two-sided Fisher randomization test "
        f"({o['permutations']:,} sign flips, seed {o['seed']}), {o['correction'].capitalize()}-corrected over "
        f"the {m} comparison{'s' if m > 1 else ''} of each metric; ▲/▼ = significantly better/worse than the "
        f"baseline at α = {o['alpha']}."
    )


def _summary_section(document: Mapping[str, Any], data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    h, cmp_ = data.headline, data.comparisons.set_index(["metric", "candidate"])
    means = document["systems"]
    costs = document.get("cost", {})
    rows = []
    for s in data.systems:
        cost = _ms(costs.get(s, {}), "p95_ms")
        if s == data.baseline:
            rows.append([f"{data.labels[s]} (baseline)", _num(means[s][h]), "-", "-", "-", "", "-", cost])
            continue
        r = cmp_.loc[(h, s)]
        rows.append(
            [
                data.labels[s],
                _num(means[s][h]),
                _signed(r.delta),
                f"[{_signed(r.ci_low)}, {_signed(r.ci_high)}]",
                _p(r.p_adjusted),
                _mark(r),
                f"{r.wins}/{r.ties}/{r.losses}",
                cost,
            ]
        )
    headers = ["system", h, "Δ vs baseline", f"{data.ci_label} of Δ", "p (adj.)", "sig", "W/T/L", "P95 latency ms"]
    lines = ["## Summary", "", _family_note(data), "", *_table(headers, rows, "lrrlrclr"), ""]
    grid = []
    for m in data.measures:
        cells = [m]
        for s in data.systems:
            if s == data.baseline:
                cells.append(_num(means[s][m]))
            else:
                r = cmp_.loc[(m, s)]
                cells.append(f"{_num(means[s][m])} ({_signed(r.delta)}) {_mark(r)}".rstrip())
        grid.append(cells)
    lines += [
        "All metrics (Δ vs baseline in parentheses):",
        "",
        *_table(["metric", *(data.labels[s] for s in data.systems)], grid, "l" + "r" * len(data.systems)),
        "",
    ]
    lines += _img(plot_files, "distribution", f"per-query {h}") + _img(plot_files, "curves", "metric at k")
    return lines


def _significance_section(data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    if len(data.systems) < 2:
        return ["## Significance", "", "Only one system: nothing to compare.", ""]
    n = int(data.comparisons["n"].iloc[0])
    correction = "Holm 1979" if data.options["correction"] == "holm" else "Bonferroni"
    lines = [
        "## Significance",
        "",
        f"Paired over the {n} queries (the unit of comparison is the query, never repeated runs of a "
        "deterministic system). Tests: paired t-test; Wilcoxon signed-rank (zero differences dropped, "
        "average ranks for ties, no continuity correction; "
        f"{_wilcoxon_methods(data)}); Fisher randomization test (Smucker, Allan & Carterette 2007), "
        f"the primary test, corrected for multiple comparisons ({correction}); {data.ci_label} of the mean difference "
        f"by paired bootstrap ({data.options['bootstrap']:,} resamples, {_CI_METHODS[data.options['ci']]}); "
        "d_z = mean Δ / sd of Δ (|d_z| ≈ 0.2 small, 0.5 medium, 0.8 large; Cohen 1988).",
        "",
    ]
    lines += _comparison_table(data, data.comparisons)
    if data.pairwise is not None:
        lines += [
            f"All pairs on {data.headline} (one family of {len(data.pairwise)} comparisons):",
            "",
            *_comparison_table(data, data.pairwise, pairs=True),
        ]
    lines += _img(plot_files, "differences", f"per-query difference in {data.headline}")
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
                _signed(r.delta),
                f"[{_signed(r.ci_low)}, {_signed(r.ci_high)}]",
                _num(r.effect_size, 2),
                f"{r.wins}/{r.ties}/{r.losses}",
                _num(r.t_stat, 2),
                _p(r.p_ttest),
                _num(r.w_stat, 1),
                _p(r.p_wilcoxon),
                _p(r.p_randomization),
                _p(r.p_adjusted),
                _mark(r),
            ]
        )
    return [
        *_table(
            [
                "metric",
                "comparison" if pairs else "system",
                "Δ",
                data.ci_label,
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


def _best_cells(table: pd.DataFrame, systems: Sequence[str], labels: Mapping[str, str]) -> list[list[str]]:
    out = []
    for _, r in table.iterrows():
        best = max(r[s] for s in systems)
        cells = [f"**{r[s]:.4f}**" if r[s] == best and len(systems) > 1 else f"{r[s]:.4f}" for s in systems]
        out.append([str(r.iloc[0]), str(int(r["queries"])) + (" (few)" if r["queries"] < 5 else ""), *cells])
    return out


def _segments_section(data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    lines = ["## Segments", ""]
    if not data.segments:
        return lines + [
            "No dataset loaded: segments need the queries and judgements."
            if data.lengths is None
            else "No query attribute takes two or more values.",
            "",
        ]
    lines += [
        f"Mean {data.headline} per value of each query attribute (best in bold; `query length` and "
        "`relevant documents` are derived for every dataset). Segments with fewer than 5 queries are marked "
        "(few): read them with care.",
        "",
    ]
    for column, table in data.segments.items():
        lines += [
            f"### By {column}",
            "",
            *_table(
                [column, "queries", *(data.labels[s] for s in data.systems)],
                _best_cells(table, data.systems, data.labels),
                "lr" + "r" * len(data.systems),
            ),
            "",
        ]
        lines += _img(plot_files, f"segment:{column}", f"{data.headline} by {column}")
    return lines


def _documents_section(data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    if data.lengths is None:
        return []
    k = data.options["k"]
    lines = ["## What each system retrieves", ""]
    for column, table in data.shares.items():
        rows = [
            [str(r[column]), *(f"{r[c]:.1%}" for c in ["corpus", "relevant", *data.systems])]
            for _, r in table.iterrows()
        ]
        lines += [
            f"### Share of {column}: top {k} vs relevant",
            "",
            f"Share of each `{column}` in the corpus, among the relevant judgements, and among each system's "
            f"top {k} over all judged queries. A share well above the relevant one means the system prefers "
            "that kind of document.",
            "",
            *_table(
                [column, "corpus", "relevant", *(f"{data.labels[s]} top {k}" for s in data.systems)],
                rows,
                "l" + "r" * (len(data.systems) + 2),
            ),
            "",
        ]
        lines += _img(plot_files, f"shares:{column}", f"{column} shares")
    rows = []
    for _, r in data.lengths.iterrows():
        fixed = {"corpus": "corpus", "relevant": "relevant documents"}
        name = fixed.get(r["set"]) or f"{data.labels[r['set']]} top {k}"
        rho = (
            "-"
            if r["set"] in fixed
            else (
                f"{_num(r['spearman_rank_length'], 3)} (p {_p(r['p_value'])})" if math.isfinite(r["p_value"]) else "n/a"
            )
        )
        rows.append([name, f"{int(r['documents']):,}", _num(r["mean_words"], 1), _num(r["median_words"], 0), rho])
    lines += [
        "### Length bias",
        "",
        "Length in words (title and text). Spearman's rho between rank and length over the top "
        f"{k}: negative means longer documents are ranked higher.",
        "",
        *_table(["documents", "count", "mean words", "median words", "rank-length rho"], rows, "lrrrr"),
        "",
    ]
    return lines


def _disagreements_section(data: ReportData) -> list[str]:
    if not data.disagreements:
        return []
    top = data.options["top"]
    lines = [
        "## Disagreements",
        "",
        f"The queries where each system differs most from the baseline on {data.headline}, with both top {top} "
        "side by side (grade: judged relevance, `-` = unjudged).",
        "",
    ]
    base = data.baseline
    for cand, worst, tops in data.disagreements:
        lines += [f"### {data.labels[cand]} vs {data.labels[base]}", ""]
        if worst.empty:
            lines += ["No query differs.", ""]
        for r in worst.itertuples(index=False):
            qid, a, b, delta = r
            text = data.query_text.get(str(qid))
            lines += [
                f"**{qid}**"
                + (f" — “{_cell(text)}”" if text else "")
                + f": {data.labels[base]} {a:.4f}, {data.labels[cand]} {b:.4f} (Δ {delta:+.4f})",
                "",
            ]
            side = tops[qid]
            rows = [[str(x["rank"]), *_hit(x, base), *_hit(x, cand)] for _, x in side.iterrows()]
            lines += [
                *_table(
                    ["rank", data.labels[base], "grade", "snippet", data.labels[cand], "grade", "snippet"],
                    rows,
                    "rlrllrl",
                ),
                "",
            ]
    return lines


def _hit(row: pd.Series, system: str) -> list[str]:
    doc, grade, text = row[f"{system} doc"], row[f"{system} grade"], row[f"{system} snippet"]
    if not doc:
        return ["", "", ""]
    return [f"`{doc}`", "-" if pd.isna(grade) else str(int(grade)), text]


def _consistency_section(data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    rows = [
        [
            data.labels[r.system],
            str(r.queries),
            _num(r.mean),
            _num(r.std),
            _num(r.min),
            _num(r.q1),
            _num(r.median),
            _num(r.q3),
            _num(r.max),
            f"{r.zero_share:.1%}",
        ]
        for r in data.consistency.itertuples()
    ]
    return [
        "## Consistency",
        "",
        f"Per-query {data.headline}: spread and failures (score 0) per system.",
        "",
        *_table(["system", "queries", "mean", "std", "min", "Q1", "median", "Q3", "max", "zero"], rows, "lrrrrrrrrr"),
        "",
    ]


def _cost_section(document: Mapping[str, Any], data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    costs = document.get("cost", {})
    if not any(costs.get(s) for s in data.systems):
        return []
    rows = []
    recall = any("index_recall_at_100" in costs.get(s, {}) for s in data.systems)
    for s in data.systems:
        c = costs.get(s, {})
        qps = c.get("queries_per_second")
        build = c.get("index_build_seconds")
        rows.append(
            [
                data.labels[s],
                _ms(c, "p50_ms"),
                _ms(c, "p95_ms"),
                _ms(c, "p99_ms"),
                f"{qps:.1f}" if qps is not None else "-",
                f"{build:.1f}" if build is not None else "-",
                f"{c['retrieve_seconds']:.1f}" if c.get("retrieve_seconds") is not None else "-",
                *([f"{c['index_recall_at_100']:.3f}" if "index_recall_at_100" in c else "exact"] if recall else []),
            ]
        )
    return [
        "## Cost",
        "",
        "Search latency per query after warm-up, one query at a time; index build and batch "
        "retrieval of all queries in seconds"
        + ("; recall@100 of approximate indexes against exact search on the same vectors." if recall else "."),
        "",
        *_table(
            ["system", "p50 ms", "p95 ms", "p99 ms", "queries/s", "index build s", "batch retrieve s"]
            + (["recall@100 vs exact"] if recall else []),
            rows,
            "lrrrrrr" + ("r" if recall else ""),
        ),
        "",
        *_img(plot_files, "latency", "latency per query"),
        *_load_table(costs, data),
        *_api_table(costs, data),
    ]


def _api_table(costs: Mapping[str, Any], data: ReportData) -> list[str]:
    """Requests, tokens and USD spent on API embedding models: the evaluation (texts not yet cached)
    and the latency stage (each timed query encoded on its own)."""

    def usd(value: Any) -> str:
        return f"${value:,.4f}" if value is not None else "unknown"

    rows = [
        [
            data.labels[s],
            f"{c['api_calls']:,}",
            f"{c['api_tokens']:,}",
            usd(c.get("api_cost_usd")),
            f"{c.get('latency_api_calls') or 0:,}",
            f"{c.get('latency_api_tokens') or 0:,}",
            usd(c.get("latency_api_cost_usd") if c.get("latency_api_calls") else 0.0),
        ]
        for s in data.systems
        if "api_calls" in (c := costs.get(s, {}))
    ]
    if not rows:
        return []
    return [
        "### API calls",
        "",
        "Embedding requests sent by this run (vectors already cached cost nothing) and their price; tokens as "
        "the API reported them. USD is unknown where no price applies (option `price`, USD per 1M tokens).",
        "",
        *_table(
            ["system", "calls", "tokens", "USD", "latency calls", "latency tokens", "latency USD"], rows, "lrrrrrr"
        ),
        "",
    ]


def _load_table(costs: Mapping[str, Any], data: ReportData) -> list[str]:
    """Queries/s and latency of each service at each concurrency level (the load curve)."""
    rows = [
        [
            data.labels[s],
            str(int(level["concurrency"])),
            f"{level['queries_per_second']:.1f}",
            f"{level['p50_ms']:.1f}",
            f"{level['p95_ms']:.1f}",
        ]
        for s in data.systems
        for level in costs.get(s, {}).get("load_curve") or ()
    ]
    if not rows:
        return []
    return [
        "### Load curve",
        "",
        "Each sampled query sent on its own by that many concurrent clients; queries/s over the wall time, "
        "latency per query end to end (as the service's users see it).",
        "",
        *_table(["system", "concurrency", "queries/s", "p50 ms", "p95 ms"], rows, "lrrrr"),
        "",
    ]


# ---------------------------------------------------------------------------------------------
