"""report.md's Cost section: latency (and what was timed), index build, API spend and load curves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from irflow.tasks.report_data import ReportData
from irflow.tasks.report_format import img, md_table, ms


def cost_section(document: Mapping[str, Any], data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
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
                ms(c, "p50_ms"),
                ms(c, "p95_ms"),
                ms(c, "p99_ms"),
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
        *md_table(
            ["system", "p50 ms", "p95 ms", "p99 ms", "queries/s", "index build s", "batch retrieve s"]
            + (["recall@100 vs exact"] if recall else []),
            rows,
            "lrrrrrr" + ("r" if recall else ""),
        ),
        "",
        *img(plot_files, "latency", "latency per query"),
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
        *md_table(
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
        *md_table(["system", "concurrency", "queries/s", "p50 ms", "p95 ms"], rows, "lrrrr"),
        "",
    ]
