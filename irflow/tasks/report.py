"""Write an evaluation's results and the report a person reads.

Files in a result folder::

    metrics.json        {"dataset": {...}, "systems": {SPEC: {METRIC: mean}}, "baseline": SPEC, "cost": ...}
    per_query.parquet   system, query_id, metric, value       (the unit of every comparison)
    runs/<slug>.trec    each system's run, TREC format
    significance.csv    every system against the baseline, every metric (tasks.significance)
    report.md, plots/*.png

``report.md``, ``significance.csv`` and the plots are derived from the first three files (and the
dataset, re-loaded by the name, split and fingerprint stored in metrics.json), so
:func:`rebuild_report` regenerates them without re-running retrieval. Pure functions over plain
data; every file is written atomically.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks import analysis, plots
from irflow.tasks.atomic import atomic_open, atomic_path, write_json
from irflow.tasks.config import irflow_version
from irflow.tasks.metrics import parse_measure
from irflow.tasks.runs import read_trec, write_trec
from irflow.tasks.schema import Dataset, InputError, IrflowError
from irflow.tasks.significance import compare_all, compare_systems
from irflow.tasks.significance import format_p as _p
from irflow.tasks.systems import as_spec

HEADLINE = "nDCG@10"  # the headline metric when computed; otherwise the first one
ANALYSIS_DEPTH = 10  # top-k of the document-type and length analyses
SIGNIFICANCE = {"permutations": 10_000, "bootstrap": 10_000, "seed": 0, "alpha": 0.05, "correction": "holm"}
MAX_SEGMENT_VALUES = 30  # a metadata column with more distinct values is free text, not a segment


@dataclass(frozen=True)
class SystemEvaluation:
    """What one system produced on a dataset: its run, per-query values and costs."""

    system: str
    run: pd.DataFrame
    per_query: pd.DataFrame  # query_id, measure, value
    means: dict[str, float]
    cost: dict[str, Any] = field(default_factory=dict)


def dataset_summary(dataset: Dataset) -> dict[str, Any]:
    m = dataset.manifest
    return {
        "name": dataset.name,
        "split": dataset.split,
        "fingerprint": dataset.fingerprint,
        "documents": m.get("documents"),
        "queries": m.get("queries"),
        "judgements": m.get("judgements"),
        "grades": m.get("grades"),
    }


def significance_options(**options: Any) -> dict[str, Any]:
    """The options of the significance tests (:data:`SIGNIFICANCE` overridden by ``options``); unknown keys fail."""
    unknown = set(options) - set(SIGNIFICANCE)
    if unknown:
        raise InputError(f"unknown significance options {sorted(unknown)}; valid: {', '.join(SIGNIFICANCE)}")
    return {**SIGNIFICANCE, **options}


def metrics_document(
    dataset: Dataset,
    evaluations: list[SystemEvaluation],
    measures: list[str],
    depth: int,
    baseline: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The content of metrics.json: ``{"dataset": {...}, "systems": {SPEC: {METRIC: value}}, "baseline": SPEC, ...}``.

    The baseline defaults to the first system; ``significance`` records the test options
    (``options`` over :data:`SIGNIFICANCE`), so a rebuilt report repeats the same tests.
    """
    systems = [e.system for e in evaluations]
    baseline = str(as_spec(baseline)) if baseline is not None else (systems[0] if systems else None)
    if baseline is not None and baseline not in systems:
        raise InputError(f"baseline {baseline!r} is not one of the evaluated systems: {', '.join(systems)}")
    return {
        "dataset": dataset_summary(dataset),
        "systems": {e.system: {m: e.means[m] for m in measures} for e in evaluations},
        "baseline": baseline,
        "significance": significance_options(**options),
        "cost": {e.system: e.cost for e in evaluations},
        "measures": measures,
        "depth": depth,
        "irflow_version": irflow_version(),
    }


def per_query_table(evaluations: list[SystemEvaluation]) -> pd.DataFrame:
    """All systems' per-query values: ``system``, ``query_id``, ``metric``, ``value``."""
    frames = [e.per_query.rename(columns={"measure": "metric"}).assign(system=e.system) for e in evaluations]
    table = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["system", "query_id", "metric", "value"])
    )
    return table[["system", "query_id", "metric", "value"]].astype(
        {"system": "str", "query_id": "str", "metric": "str", "value": "float64"}
    )


# ---------------------------------------------------------------------------------------------
# stored results: read, check, combine


@dataclass(frozen=True)
class StoredResults:
    """A result folder's metrics document, per-query table and runs (keyed by system spec)."""

    document: dict[str, Any]
    per_query: pd.DataFrame
    runs: dict[str, pd.DataFrame]

    @property
    def systems(self) -> list[str]:
        """Systems in evaluation order (per_query.parquet keeps it; metrics.json's keys are sorted)."""
        return list(dict.fromkeys(self.per_query["system"]))

    @property
    def baseline(self) -> str:
        return str(self.document.get("baseline") or self.systems[0])


def load_results(run_dir: str | Path) -> StoredResults:
    """Read ``metrics.json``, ``per_query.parquet`` and ``runs/*.trec`` of a result folder."""
    import json

    run_dir = Path(run_dir)
    for name in ("metrics.json", "per_query.parquet"):
        if not (run_dir / name).is_file():
            raise InputError(
                f"not a result folder: {name} is missing (write one with `irflow run --output DIR`)", path=str(run_dir)
            )
    try:
        document = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
        per_query = pd.read_parquet(run_dir / "per_query.parquet")
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read results: {exc}", path=str(run_dir)) from None
    per_query = per_query.astype({"system": "str", "query_id": "str", "metric": "str", "value": "float64"})
    runs = {s: read_trec(run_dir / "runs" / f"{as_spec(s).slug}.trec") for s in dict.fromkeys(per_query["system"])}
    return StoredResults(document, per_query, runs)


def check_same_dataset(documents: Sequence[Mapping[str, Any]]) -> None:
    """Raise InputError unless every metrics document describes the same dataset (by fingerprint)."""
    seen: dict[str, str] = {}
    for doc in documents:
        ds = doc.get("dataset", {})
        fingerprint = str(ds.get("fingerprint"))
        label = f"{ds.get('name')} ({ds.get('split')})"
        if seen and fingerprint not in seen:
            ((first, first_label),) = list(seen.items())[:1]
            raise InputError(
                f"cannot compare runs over different datasets: {first_label} has fingerprint "
                f"{first} but {label} has fingerprint {fingerprint}"
            )
        seen.setdefault(fingerprint, label)


def combine_results(results: Sequence[StoredResults], labels: Sequence[str] | None = None) -> StoredResults:
    """Merge result folders of the same dataset into one, e.g. last night's run beside tonight's.

    With ``labels`` every system is renamed ``<label>/<system>`` (so the same spec can appear in two
    folders); without, a system present twice is an error. The first folder's baseline stays the
    baseline; only metrics present in every folder are kept.
    """
    if not results:
        raise InputError("nothing to combine")
    check_same_dataset([r.document for r in results])
    if labels is not None and len(labels) != len(results):
        raise InputError(f"{len(labels)} labels for {len(results)} result folders")
    prefixes = [f"{label}/" for label in labels] if labels is not None else [""] * len(results)
    measures = [m for m in results[0].document["measures"] if all(m in r.document["measures"] for r in results)]
    frames, runs, systems, cost = [], {}, {}, {}
    for r, prefix in zip(results, prefixes):
        for s in r.systems:
            name = prefix + s
            if name in runs:
                raise InputError(f"system {name!r} appears in two result folders; pass labels to tell them apart")
            runs[name] = r.runs[s]
            systems[name] = {m: r.document["systems"][s][m] for m in measures}
            cost[name] = r.document.get("cost", {}).get(s, {})
        frames.append(r.per_query[r.per_query["metric"].isin(measures)].assign(system=prefix + r.per_query["system"]))
    document = {
        **results[0].document,
        "systems": systems,
        "cost": cost,
        "measures": measures,
        "baseline": prefixes[0] + results[0].baseline,
    }
    return StoredResults(document, pd.concat(frames, ignore_index=True), runs)


# ---------------------------------------------------------------------------------------------
# analysis: everything the report shows, computed once


@dataclass(frozen=True)
class ReportData:
    """The numbers behind report.md and the plots."""

    baseline: str
    systems: list[str]
    labels: dict[str, str]
    headline: str
    measures: list[str]  # headline first
    wide: pd.DataFrame  # query x system, headline metric
    comparisons: pd.DataFrame  # every metric, candidates vs baseline
    pairwise: pd.DataFrame | None  # headline metric, all pairs (3+ systems)
    consistency: pd.DataFrame
    curves: pd.DataFrame
    segments: dict[str, pd.DataFrame] = field(default_factory=dict)
    shares: dict[str, pd.DataFrame] = field(default_factory=dict)
    lengths: pd.DataFrame | None = None
    disagreements: list[tuple[str, pd.DataFrame, dict[str, pd.DataFrame]]] = field(default_factory=list)
    query_text: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # k, top and the significance options


def _metadata_columns(table: pd.DataFrame, listed: Sequence[str] | None, fixed: Sequence[str]) -> list[str]:
    columns = [c for c in (listed if listed is not None else table.columns) if c in table.columns and c not in fixed]
    return [c for c in columns if 2 <= table[c].nunique(dropna=False) <= MAX_SEGMENT_VALUES]


def significance_table(per_query: pd.DataFrame, measures: Sequence[str], baseline: str, **options: Any) -> pd.DataFrame:
    """Every system against ``baseline`` on every metric (one Holm family per metric)."""
    return compare_all(per_query, list(measures), baseline, **options)


def analyse(
    results: StoredResults,
    dataset: Dataset | None = None,
    *,
    comparisons: pd.DataFrame | None = None,
    notes: Sequence[str] = (),
    k: int = ANALYSIS_DEPTH,
    disagreement_queries: int = 3,
    top: int = 5,
    **options: Any,
) -> ReportData:
    """Compute everything the report shows. Dataset-dependent parts (segments, document types,
    lengths, snippets) are left out when ``dataset`` is None. The significance tests use the options
    stored in the document, overridden by ``options`` (permutations, bootstrap, seed, alpha, correction)."""
    document, per_query = results.document, results.per_query
    options = significance_options(**{**document.get("significance", {}), **options})
    systems = results.systems
    baseline = results.baseline
    if baseline not in systems:
        raise InputError(f"baseline {baseline!r} has no per-query values; systems: {', '.join(systems)}")
    systems = [baseline] + [s for s in systems if s != baseline]
    measures = [m for m in document["measures"] if m in set(per_query["metric"])]
    if not measures:
        raise InputError("the per-query table holds none of the metrics listed in metrics.json")
    headline = HEADLINE if HEADLINE in measures else measures[0]
    measures = [headline] + [m for m in measures if m != headline]
    if comparisons is None:
        comparisons = significance_table(per_query, measures, baseline, **options)
    order = {m: i for i, m in enumerate(measures)}  # headline first, whoever computed the table
    comparisons = (
        comparisons[comparisons["metric"].isin(order)]
        .sort_values("metric", key=lambda c: c.map(order), kind="mergesort")
        .reset_index(drop=True)
    )
    pairwise = compare_systems(per_query, headline, baseline, all_pairs=True, **options) if len(systems) >= 3 else None
    wide = analysis.metric_table(per_query, headline)[systems]
    data: dict[str, Any] = {}
    if dataset is not None:
        runs = {s: results.runs[s] for s in systems}
        features = analysis.query_features(dataset.queries, dataset.qrels)
        queries = dataset.queries.assign(query_id=dataset.queries["query_id"].astype(str)).merge(
            features, on="query_id", how="left"
        )
        query_columns = _metadata_columns(queries, dataset.manifest.get("query_metadata"), ("query_id", "text"))
        data["segments"] = {
            c: analysis.segments(per_query, queries, c, headline)
            for c in [*query_columns, "query length", "relevant documents"]
            if queries[c].nunique() >= 2
        }
        doc_columns = _metadata_columns(
            dataset.corpus, dataset.manifest.get("document_metadata"), ("doc_id", "title", "text")
        )
        data["shares"] = {c: analysis.document_shares(runs, dataset.qrels, dataset.corpus, c, k=k) for c in doc_columns}
        data["lengths"] = analysis.length_bias(runs, dataset.qrels, dataset.corpus, k=k)
        data["query_text"] = dict(zip(dataset.queries["query_id"].astype(str), dataset.queries["text"].astype(str)))
        qrels, corpus = dataset.qrels, dataset.corpus
    else:
        qrels = pd.DataFrame({"query_id": [], "doc_id": [], "relevance": []})
        corpus = pd.DataFrame({"doc_id": [], "title": [], "text": []})
    data["disagreements"] = []
    for cand in systems[1:]:
        worst = analysis.disagreements(per_query, headline, baseline, cand, n=disagreement_queries)
        pair = {baseline: results.runs[baseline], cand: results.runs[cand]}
        tops = {q: analysis.side_by_side(pair, q, qrels, corpus, k=top, width=60) for q in worst["query_id"]}
        data["disagreements"].append((cand, worst, tops))
    return ReportData(
        baseline=baseline,
        systems=systems,
        labels=plots.short_labels(systems),
        headline=headline,
        measures=measures,
        wide=wide,
        comparisons=comparisons,
        pairwise=pairwise,
        consistency=analysis.consistency(per_query, headline),
        curves=analysis.metric_curves({s: {m: document["systems"][s][m] for m in measures} for s in systems}),
        notes=list(notes),
        options={"k": k, "top": top, **options},
        **data,
    )


# ---------------------------------------------------------------------------------------------
# plots


def write_plots(output: str | Path, data: ReportData, document: Mapping[str, Any]) -> dict[str, str]:
    """Write every plot into ``output/plots``; returns ``{name: path relative to output}``."""
    output = Path(output)
    key = parse_measure(data.headline).key
    written: dict[str, str] = {}

    def path(name: str, file: str) -> Path:
        written[name] = f"plots/{file}"
        return output / "plots" / file

    plots.per_query_distribution(data.wide, data.headline, path("distribution", f"per_query_{key}.png"), data.labels)
    if len(data.curves):
        plots.metric_curves(data.curves, path("curves", "metric_at_k.png"), data.labels)
    costs = document.get("cost", {})
    if any(costs.get(s, {}).get("p95_ms") is not None for s in data.systems):
        plots.latency(costs, path("latency", "latency.png"), data.labels)
    if len(data.systems) > 1:
        headline = data.comparisons[data.comparisons["metric"] == data.headline].set_index("candidate")
        tests = headline[["ci_low", "ci_high", "p_adjusted"]].to_dict("index")
        plots.differences(
            data.wide,
            data.baseline,
            data.systems[1:],
            data.headline,
            path("differences", f"difference_{key}.png"),
            data.labels,
            tests,
            _ci(data),
        )
    for column, table in data.segments.items():
        plots.segment_bars(
            table, column, data.headline, path(f"segment:{column}", f"segment_{_slug(column)}.png"), data.labels
        )
    for column, table in data.shares.items():
        plots.document_share_bars(
            table, column, data.options["k"], path(f"shares:{column}", f"documents_{_slug(column)}.png"), data.labels
        )
    for stale in set((output / "plots").glob("*.png")) - {output / f for f in written.values()}:
        stale.unlink()  # a plot of an earlier build that this one does not draw would mislead
    return written


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text).strip("_").lower()


# ---------------------------------------------------------------------------------------------
# markdown


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
    for note in data.notes:
        lines += [f"> **Note.** {note}", ""]
    lines += _summary_section(document, data, plot_files)
    lines += _recommendations_section(document, data)
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


def _ci(data: ReportData) -> str:
    return f"{1 - data.options['alpha']:.0%} CI"


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
    headers = ["system", h, "Δ vs baseline", f"{_ci(data)} of Δ", "p (adj.)", "sig", "W/T/L", "P95 latency ms"]
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
        "scipy's `zero_method='wilcox'`); Fisher randomization test (Smucker, Allan & Carterette 2007), "
        f"the primary test, corrected for multiple comparisons ({correction}); {_ci(data)} of the mean difference "
        f"by paired bootstrap ({data.options['bootstrap']:,} resamples, percentile); "
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
                _ci(data),
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
            ]
        )
    return [
        "## Cost",
        "",
        "Search latency per query after warm-up, one query at a time; index build and batch "
        "retrieval of all queries in seconds.",
        "",
        *_table(
            ["system", "p50 ms", "p95 ms", "p99 ms", "queries/s", "index build s", "batch retrieve s"], rows, "lrrrrrr"
        ),
        "",
        *_img(plot_files, "latency", "latency per query"),
    ]


# ---------------------------------------------------------------------------------------------
# recommendations: short sentences derived from the numbers above


def recommendations(document: Mapping[str, Any], data: ReportData) -> list[str]:
    """What to pick and why: the best system and whether it is significantly better, its cost, where
    each system wins, consistency, and document-type and length preferences."""
    h, base, lab = data.headline, data.baseline, data.labels
    means = {s: document["systems"][s][h] for s in data.systems}
    p95 = {s: document.get("cost", {}).get(s, {}).get("p95_ms") for s in data.systems}
    if len(data.systems) < 2:
        return [f"Only {lab[base]} was evaluated ({h} {means[base]:.4f}); add a second system to compare."]
    cmp_ = data.comparisons[data.comparisons["metric"] == h].set_index("candidate")
    best = max(data.systems, key=lambda s: means[s])
    out = []
    better = [s for s in data.systems[1:] if cmp_.loc[s, "significant"] and cmp_.loc[s, "delta"] > 0]
    worse = [s for s in data.systems[1:] if cmp_.loc[s, "significant"] and cmp_.loc[s, "delta"] < 0]
    if best == base:
        others = []
        for s in data.systems[1:]:
            r = cmp_.loc[s]
            slower = f", {p95[s] / p95[base]:.1f}× the P95 latency" if p95[s] and p95[base] else ""
            others.append(
                f"{lab[s]} {r.delta:+.4f} ({_ci(data)} {r.ci_low:+.4f} to {r.ci_high:+.4f}, adjusted p "
                f"{_p(r.p_adjusted)}, {'significantly worse' if s in worse else 'not significant'}{slower})"
            )
        out.append(
            f"Keep the baseline {lab[base]}: no system has a higher mean {h} ({means[base]:.4f}); "
            + "; ".join(others)
            + "."
        )
    elif best in better:
        r = cmp_.loc[best]
        out.append(
            f"Pick {lab[best]}: {h} {means[best]:.4f} vs {means[base]:.4f} for {lab[base]}, "
            f"{r.delta:+.4f} ({_ci(data)} {r.ci_low:+.4f} to {r.ci_high:+.4f}, adjusted p {_p(r.p_adjusted)}), "
            f"better on {r.wins} of {r.n} queries and worse on {r.losses}."
        )
    else:
        r = cmp_.loc[best]
        ci = f"{_ci(data)} {r.ci_low:+.4f} to {r.ci_high:+.4f}"
        why = (
            f"the {ci} includes 0"
            if r.ci_low <= 0 <= r.ci_high
            else f"unadjusted p {_p(r.p_randomization)} and the uncorrected {ci} point the same way, which is "
            "suggestive, not conclusive"
        )
        out.append(
            f"{lab[best]} has the highest mean {h} ({means[best]:.4f}, {r.delta:+.4f} over {lab[base]}), but "
            f"the difference is not significant after {r.correction.capitalize()} correction (adjusted p "
            f"{_p(r.p_adjusted)}; {why}): on these {r.n} queries choose on cost, or add queries."
        )
    if best != base and p95[best] and p95[base]:
        ratio = p95[best] / p95[base]
        out.append(
            f"Cost: {lab[best]} has a P95 latency of {p95[best]:.1f} ms vs {p95[base]:.1f} ms for {lab[base]} "
            f"({ratio:.1f}×)"
            + (f" for {means[best] - means[base]:+.4f} {h}" if ratio > 1 else "")
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
        f"Consistency: {lab[steady]} varies least across queries (sd {spread.loc[steady, 'std']:.3f}); "
        "queries scoring 0: " + ", ".join(f"{lab[s]} {fails[s]:.0%}" for s in data.systems) + "."
    )
    out += _preferences(data)
    return out


def _segment_wins(data: ReportData, best: str) -> list[str]:
    wins = []
    for column, table in data.segments.items():
        for _, r in table.iterrows():
            winner = max(data.systems, key=lambda s: r[s])
            if winner != best and r["queries"] >= 5 and r[winner] > r[best]:
                wins.append(
                    f"{data.labels[winner]} on {column} = {r[column]} ({int(r['queries'])} queries, "
                    f"{r[winner]:.3f} vs {r[best]:.3f})"
                )
    if not wins:
        return [f"{data.labels[best]} is also best in every segment of 5 or more queries."] if data.segments else []
    return [
        f"Where {data.labels[best]} is not the best ({data.headline}): "
        + "; ".join(wins[:6])
        + ("; …" if len(wins) > 6 else "")
        + "."
    ]


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
                    f"{data.labels[s]} favours {kind} documents: {mean:.0f} words on average in its top {k} "
                    f"vs {relevant:.0f} among relevant documents."
                )
    return out


def _recommendations_section(document: Mapping[str, Any], data: ReportData) -> list[str]:
    return ["## Recommendations", "", *(f"- {line}" for line in recommendations(document, data)), ""]


# ---------------------------------------------------------------------------------------------
# writing


def build_report(
    output: str | Path,
    results: StoredResults,
    dataset: Dataset | None = None,
    *,
    comparisons: pd.DataFrame | None = None,
    notes: Sequence[str] = (),
    **options: Any,
) -> str:
    """Write report.md, significance.csv and plots/ into ``output``; returns the markdown."""
    output = Path(output)
    data = analyse(results, dataset, comparisons=comparisons, notes=notes, **options)
    files = write_plots(output, data, results.document)
    text = markdown_report(results.document, data, files)
    with atomic_path(output / "significance.csv") as tmp:
        data.comparisons.to_csv(tmp, index=False)
    with atomic_open(output / "report.md", "w", encoding="utf-8") as fh:
        fh.write(text)
    return text


def write_outputs(
    output: str | Path,
    dataset: Dataset,
    evaluations: list[SystemEvaluation],
    measures: list[str],
    depth: int,
    *,
    baseline: str | None = None,
    comparisons: pd.DataFrame | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Write every result file into ``output``; returns the metrics document.

    ``options`` are the significance tests' (permutations, bootstrap, seed, alpha, correction), recorded
    in metrics.json; ``comparisons`` (from :func:`significance_table`, with the same options) is
    computed here when not given.
    """
    output = Path(output)
    document = metrics_document(dataset, evaluations, measures, depth, baseline, **options)
    for e in evaluations:
        write_trec(e.run, output / "runs" / f"{as_spec(e.system).slug}.trec", tag=e.system)
    table = per_query_table(evaluations)
    with atomic_path(output / "per_query.parquet") as tmp:
        table.to_parquet(tmp, index=False)
    write_json(output / "metrics.json", document)
    if evaluations:
        results = StoredResults(document, table, {e.system: e.run for e in evaluations})
        build_report(output, results, dataset, comparisons=comparisons)
    else:
        with atomic_open(output / "report.md", "w", encoding="utf-8") as fh:
            fh.write(markdown_report(document))
    return document


def rebuild_report(run_dir: str | Path, dataset: Dataset | None = None, *, load: bool = True, **options: Any) -> Path:
    """Rebuild report.md, significance.csv and plots of a result folder from its stored files.

    The dataset (for segments, document types and snippets) is ``dataset`` or, with ``load``,
    re-loaded by the name and split in metrics.json; it must have the stored fingerprint. If it
    cannot be loaded the report is written without those sections and says why. The tests repeat
    the options stored in metrics.json unless ``options`` override them.
    """
    run_dir = Path(run_dir)
    results = load_results(run_dir)
    stored = results.document["dataset"]
    notes = []
    if dataset is None and load:
        from irflow.tasks.ingest import load_dataset

        try:
            dataset = load_dataset(stored["name"], stored.get("split"))
        except (IrflowError, KeyError, OSError) as exc:
            notes.append(
                f"dataset {stored['name']!r} could not be loaded ({exc}); segments, document types, "
                "lengths and snippets are left out."
            )
    if dataset is not None:
        check_same_dataset([results.document, {"dataset": dataset_summary(dataset)}])
    build_report(run_dir, results, dataset, notes=notes, **options)
    return run_dir / "report.md"


__all__ = [
    "ReportData",
    "StoredResults",
    "SystemEvaluation",
    "analyse",
    "build_report",
    "check_same_dataset",
    "combine_results",
    "load_results",
    "markdown_report",
    "metrics_document",
    "per_query_table",
    "rebuild_report",
    "recommendations",
    "significance_table",
    "write_outputs",
    "write_plots",
]
