"""Everything the report shows, computed once from stored results (:func:`analyse`), and its plots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.compare import analysis
from irflow.tasks.compare.significance import compare_all, compare_systems
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.metrics import parse_measure
from irflow.tasks.report import plots
from irflow.tasks.report.coverage import CONDENSED_HEADLINE
from irflow.tasks.report.results import StoredResults

HEADLINE = "nDCG@10"  # the headline metric when computed (see headline_of); otherwise the first one
ANALYSIS_DEPTH = 10  # top-k of the document-type and length analyses
SIGNIFICANCE = {
    "permutations": 10_000,
    "bootstrap": 10_000,
    "seed": 0,
    "alpha": 0.05,
    "correction": "holm",
    "ci": "bca",  # the bootstrap interval's method (significance.CI_METHODS)
}
MAX_SEGMENT_VALUES = 30  # a metadata column with more distinct values is free text, not a segment
MAX_NUMERIC_SEGMENT_VALUES = 10  # a number column with more is a measurement (a query log's count), not a segment


def headline_of(document: Mapping[str, Any], measures: Sequence[str]) -> str:
    """The report's headline: the condensed-list nDCG@10 for click-derived or pooled judgements (they
    cannot see what other systems find), else nDCG@10, else the first metric computed."""
    preferred = [CONDENSED_HEADLINE] if document.get("coverage", {}).get("origin") else []
    return next((m for m in (*preferred, HEADLINE) if m in measures), measures[0])


def significance_options(**options: Any) -> dict[str, Any]:
    """The options of the significance tests (:data:`SIGNIFICANCE` overridden by ``options``); unknown keys fail."""
    unknown = set(options) - set(SIGNIFICANCE)
    if unknown:
        raise InputError(f"unknown significance options {sorted(unknown)}; valid: {', '.join(SIGNIFICANCE)}")
    return {**SIGNIFICANCE, **options}


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

    @property
    def ci_label(self) -> str:
        """How the report names its confidence intervals, e.g. ``95% CI``."""
        return f"{1 - self.options['alpha']:.0%} CI"


def _metadata_columns(table: pd.DataFrame, listed: Sequence[str] | None, fixed: Sequence[str]) -> list[str]:
    columns = [c for c in (listed if listed is not None else table.columns) if c in table.columns and c not in fixed]
    return [c for c in columns if 2 <= table[c].nunique(dropna=False) <= _most_segment_values(table[c])]


def _most_segment_values(column: pd.Series) -> int:
    return MAX_NUMERIC_SEGMENT_VALUES if pd.api.types.is_numeric_dtype(column) else MAX_SEGMENT_VALUES


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
    headline = headline_of(document, measures)
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
        labels=plots.short_labels(systems, document.get("labels")),
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
            data.ci_label,
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
