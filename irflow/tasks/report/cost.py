"""report.md's Cost section: latency (and what was timed), index build, API spend and load curves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from irflow.tasks.report.data import ReportData
from irflow.tasks.report.format import img, md_table, ms


def _seconds(c: Mapping[str, Any], key: str, stage: str) -> str:
    """A stage's seconds, ``cached`` where this run loaded it instead (``tasks.retrieve.costs``), else ``-``."""
    value = c.get(key)
    cached = [part for part in c.get("cached") or () if part.startswith(stage)]
    if value is not None:
        return f"{value:.1f}" + (" + cached" if cached else "")
    return "cached" if cached else "-"


def _rate(c: Mapping[str, Any]) -> str:
    value = c.get("documents_per_second")
    if value is not None:
        load = c.get("load_seconds")
        return f"{value:,.0f}" + (f" (+{load:.1f} s load)" if load else "")
    return "cached" if any(part.startswith("embeddings") for part in c.get("cached") or ()) else "-"


def cost_section(document: Mapping[str, Any], data: ReportData, plot_files: Mapping[str, str]) -> list[str]:
    costs = document.get("cost", {})
    if not any(costs.get(s) for s in data.systems):
        return []
    rows = []
    failed = [s for s in data.systems if costs.get(s, {}).get("latency_error")]
    recall = any("index_recall_at_100" in costs.get(s, {}) for s in data.systems)
    for s in data.systems:
        c = costs.get(s, {})
        qps = c.get("queries_per_second")
        rows.append(
            [
                data.labels[s],
                ms(c, "p50_ms"),
                ms(c, "p95_ms"),
                ms(c, "p99_ms"),
                f"{qps:.1f}" if qps is not None else "-",
                _seconds(c, "index_build_seconds", "index"),
                _rate(c),
                f"{c['retrieve_seconds']:.1f}" if c.get("retrieve_seconds") is not None else "-",
                *([f"{c['index_recall_at_100']:.3f}" if "index_recall_at_100" in c else "exact"] if recall else []),
            ]
        )
    return [
        "## Cost",
        "",
        "Search latency per query after warm-up, one query at a time; index build, corpus encoding "
        "(documents/s from the first encoded batch; `+N s load`: loading the model before it, when this run "
        "encoded anything) and batch retrieval of all queries by this run. `cached`: this run loaded that stage from "
        "its cache, so it has no time of its own (the first run's time is not this run's)"
        + ("; recall@100 of approximate indexes against exact search on the same vectors." if recall else "."),
        "",
        *md_table(
            ["system", "p50 ms", "p95 ms", "p99 ms", "queries/s", "index build s", "encode docs/s", "batch retrieve s"]
            + (["recall@100 vs exact"] if recall else []),
            rows,
            "lrrrrrrr" + ("r" if recall else ""),
        ),
        "",
        *[f"- {data.labels[s]}: latency failed ({costs[s]['latency_error']}); its metrics stand." for s in failed],
        *([""] if failed else []),
        *latency_method(costs, data),
        *img(plot_files, "latency", "latency per query"),
        *_load_table(costs, data),
        *_api_table(costs, data),
        *_backend_table(costs, data),
    ]


def _sampled(c: Mapping[str, Any]) -> str:
    timed, total = c.get("queries"), c.get("queries_total")
    if total is not None and timed is not None and timed < total:
        return f"{timed:,} of {total:,} queries (seeded sample)"
    return f"all {timed:,} queries" if timed is not None else "?"


def _range(c: Mapping[str, Any], key: str) -> str:
    low, high = c.get(f"{key}_min"), c.get(f"{key}_max")
    return f"{low:.2f}–{high:.2f}" if low is not None and high is not None else "-"


def _interval(c: Mapping[str, Any], key: str) -> str:
    low, high = c.get(f"{key}_ci_low"), c.get(f"{key}_ci_high")
    return f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else "-"


def _load(c: Mapping[str, Any]) -> str:
    before, after = c.get("load_before"), c.get("load_after")
    if before is None and after is None:
        return "-"
    return " → ".join(f"{x:.2f}" for x in (before, after) if x is not None)


def latency_method(costs: Mapping[str, Any], data: ReportData) -> list[str]:
    """What each latency figure measured: queries timed (of how many), repeats, warm-up, threads, the spread
    over repeats and queries, and the machine's load average around the timing. Fields a latency record
    lacks are shown as ``-``."""
    timed = [s for s in data.systems if costs.get(s, {}).get("p50_ms") is not None]
    if not timed:
        return []
    first = costs[timed[0]]
    same = all(
        (costs[s].get("queries"), costs[s].get("queries_total"), costs[s].get("num_runs"))
        == (first.get("queries"), first.get("queries_total"), first.get("num_runs"))
        for s in timed
    )
    lines = ["### How latency was measured", ""]
    if same:
        threads = f", {first['threads']} thread{'s' if first['threads'] != 1 else ''}" if first.get("threads") else ""
        lines += [
            f"Each system timed on {_sampled(first)}, each query searched on its own "
            f"{first.get('num_runs', '?')} time(s) after {first.get('warmup', '?')} warm-up queries{threads}; "
            "p50/p95/p99 over every timed search. Per repeat: the p50 of that repeat (min–max over repeats); "
            "95% CI: bootstrap over queries. Load: the machine's 1-minute load average before → after the "
            "timing (a loaded machine slows every system).",
            "",
        ]
    rows = [
        [
            data.labels[s],
            _sampled(costs[s]),
            str(costs[s].get("num_runs", "-")),
            _range(costs[s], "p50_ms"),
            _interval(costs[s], "p50_ms"),
            _interval(costs[s], "p95_ms"),
            _load(costs[s]),
        ]
        for s in timed
    ]
    lines += [
        *md_table(
            ["system", "queries timed", "repeats", "p50 ms per repeat", "p50 ms 95% CI", "p95 ms 95% CI", "load"],
            rows,
            "llrrrrr",
        ),
        "",
    ]
    return lines


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


def torch_fp32_twin(system: str) -> str | None:
    """The spec of ``system`` run on torch fp32 (same model, index and first stage), or None when
    ``system`` is not a dense or rerank system with other encoder options."""
    import dataclasses

    from irflow.tasks.systems.specs import DenseSpec, RerankSpec, parse_system

    spec = parse_system(system)
    default = ("torch", None, "fp32")
    if not isinstance(spec, DenseSpec | RerankSpec) or (spec.backend, spec.quantize, spec.precision) == default:
        return None
    return str(dataclasses.replace(spec, backend="torch", quantize=None, precision="fp32", device=None))


def _backend_table(costs: Mapping[str, Any], data: ReportData) -> list[str]:
    """Speed against quality of each encoding backend next to its torch fp32 twin in this run: the
    encode rate ratio and the headline metric's difference (the quality an int8 or bf16 graph costs)."""
    rows = []
    for s in data.systems:
        twin = torch_fp32_twin(s)
        if twin is None or twin not in data.systems:
            continue
        rate, base = costs.get(s, {}).get("documents_per_second"), costs.get(twin, {}).get("documents_per_second")
        mean, base_mean = float(data.wide[s].mean()), float(data.wide[twin].mean())
        rows.append(
            [
                data.labels[s],
                data.labels[twin],
                _rate(costs.get(s, {})),
                _rate(costs.get(twin, {})),
                f"{rate / base:.2f}×" if rate and base else "-",
                f"{mean:.4f}",
                f"{mean - base_mean:+.4f}",
            ]
        )
    if not rows:
        return []
    return [
        "### Encoding backends",
        "",
        f"Each system whose model runs on another backend, quantisation or precision beside the same model on "
        f"torch fp32 in this run: corpus encoding speed (documents/s; `cached` where this run encoded nothing) "
        f"and what it costs in {data.headline}.",
        "",
        *md_table(
            ["system", "torch fp32", "docs/s", "torch docs/s", "speed", data.headline, f"Δ{data.headline}"],
            rows,
            "llrrrrr",
        ),
        "",
    ]
