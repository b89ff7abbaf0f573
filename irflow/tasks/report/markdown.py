"""report.md: the Markdown a person reads, section by section, from :class:`~irflow.tasks.report.data.ReportData`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from irflow.tasks.ingest.qrels import describe_missing_documents
from irflow.tasks.report.calibration import calibration_section
from irflow.tasks.report.cost import cost_section
from irflow.tasks.report.data import ReportData
from irflow.tasks.report.format import cell, format_p, img, md_table, ms, num
from irflow.tasks.report.power import power_note
from irflow.tasks.report.recommendations import VERDICT_LEAD, recommendations_section, verdict
from irflow.tasks.report.significance import significance_section, summary_section


def _simple_report(document: Mapping[str, Any]) -> list[str]:
    """One row per system and metric means, best in bold (the report without per-query analysis)."""
    measures = document["measures"]
    systems = document["systems"]
    best = {m: max(v[m] for v in systems.values()) for m in measures} if systems else {}
    rows = [
        [
            f"`{s}`",
            *((f"**{v[m]:.4f}**" if v[m] == best[m] else f"{v[m]:.4f}") for m in measures),
            ms(document.get("cost", {}).get(s, {}), "p95_ms"),
        ]
        for s, v in systems.items()
    ]
    return [
        *md_table(["system", *measures, "p95 ms"], rows, "l" + "r" * (len(measures) + 1)),
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
        f"fingerprint `{str(ds['fingerprint'])[:16]}`; depth {document['depth']}"
        + ("." if document.get("depth_given", True) else " (run files: every hit, as trec_eval reads them)."),
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
        return "\n".join(_header(document) + _simple_report(document) + calibration_section(document))
    plot_files = plot_files or {}
    lines = _header(document)
    lines[2:2] = [VERDICT_LEAD + verdict(document, data), ""]  # the first paragraph, under the title
    lines += _systems_section(data)
    lines += _external_section(document, data)
    for note in data.notes:
        lines += [f"> **Note.** {note}", ""]
    lines += summary_section(document, data, plot_files)
    lines += power_note(data)  # the smallest difference these queries detect
    lines += calibration_section(document)
    lines += recommendations_section(document, data)
    lines += significance_section(data, plot_files)
    lines += _segments_section(data, plot_files)
    lines += _documents_section(data, plot_files)
    lines += _disagreements_section(data)
    lines += _consistency_section(data, plot_files)
    lines += cost_section(document, data, plot_files)
    return "\n".join(lines)


def _systems_section(data: ReportData) -> list[str]:
    rows = [[data.labels[s] + (" (baseline)" if s == data.baseline else ""), f"`{s}`"] for s in data.systems]
    return ["## Systems", "", *md_table(["label", "system spec"], rows, "ll"), ""]


def _external_section(document: Mapping[str, Any], data: ReportData) -> list[str]:
    """What irflow dropped from rankings made elsewhere (query ids the dataset does not know), the hits of
    documents not in the corpus it kept at their rank, and why a run file has no latency."""
    costs = document.get("cost", {})
    lines = []
    for s in data.systems:
        c = costs.get(s, {})
        if c.get("dropped_hits"):
            lines.append(
                f"- {data.labels[s]}: {c['dropped_hits']:,} hits dropped, of {c.get('unknown_queries', 0):,} query ids "
                "that are not queries of this split."
            )
        if c.get("unknown_documents"):
            n = c["unknown_documents"]
            lines.append(
                f"- {data.labels[s]}: {c.get('unknown_document_hits', 0):,} hits of {n:,} document{'s' * (n != 1)} "
                "not in the corpus, kept at their rank as trec_eval keeps them (relevant only where the qrels "
                "judge them)."
            )
        if c.get("queries_without_hits"):
            lines.append(
                f"- {data.labels[s]}: {c['queries_without_hits']:,} judged queries have no hit (they score 0)."
            )
        if c.get("note"):
            lines.append(f"- {data.labels[s]}: latency {c['note']}.")
    return ["## Systems built elsewhere", "", *lines, ""] if lines else []


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
            *md_table(
                [column, "queries", *(data.labels[s] for s in data.systems)],
                _best_cells(table, data.systems, data.labels),
                "lr" + "r" * len(data.systems),
            ),
            "",
        ]
        lines += img(plot_files, f"segment:{column}", f"{data.headline} by {column}")
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
            *md_table(
                [column, "corpus", "relevant", *(f"{data.labels[s]} top {k}" for s in data.systems)],
                rows,
                "l" + "r" * (len(data.systems) + 2),
            ),
            "",
        ]
        lines += img(plot_files, f"shares:{column}", f"{column} shares")
    rows = []
    for _, r in data.lengths.iterrows():
        fixed = {"corpus": "corpus", "relevant": "relevant documents"}
        name = fixed.get(r["set"]) or f"{data.labels[r['set']]} top {k}"
        rho = (
            "-"
            if r["set"] in fixed
            else (
                f"{num(r['spearman_rank_length'], 3)} (p {format_p(r['p_value'])})"
                if math.isfinite(r["p_value"])
                else "n/a"
            )
        )
        rows.append([name, f"{int(r['documents']):,}", num(r["mean_words"], 1), num(r["median_words"], 0), rho])
    lines += [
        "### Length bias",
        "",
        "Length in words (title and text). Spearman's rho between rank and length over the top "
        f"{k}: negative means longer documents are ranked higher.",
        "",
        *md_table(["documents", "count", "mean words", "median words", "rank-length rho"], rows, "lrrrr"),
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
                + (f" — “{cell(text)}”" if text else "")
                + f": {data.labels[base]} {a:.4f}, {data.labels[cand]} {b:.4f} (Δ {delta:+.4f})",
                "",
            ]
            side = tops[qid]
            rows = [[str(x["rank"]), *_hit(x, base), *_hit(x, cand)] for _, x in side.iterrows()]
            lines += [
                *md_table(
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
            num(r.mean),
            num(r.std),
            num(r.min),
            num(r.q1),
            num(r.median),
            num(r.q3),
            num(r.max),
            f"{r.zero_share:.1%}",
        ]
        for r in data.consistency.itertuples()
    ]
    return [
        "## Consistency",
        "",
        f"Per-query {data.headline}: spread and failures (score 0) per system.",
        "",
        *md_table(["system", "queries", "mean", "std", "min", "Q1", "median", "Q3", "max", "zero"], rows, "lrrrrrrrrr"),
        "",
    ]


# ---------------------------------------------------------------------------------------------
