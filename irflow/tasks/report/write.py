"""Write an evaluation's results and the report a person reads.

Files in a result folder::

    metrics.json        {"dataset": {...}, "systems": {SPEC: {METRIC: mean}}, "baseline": SPEC, "cost": ...}
    per_query.parquet   system, query_id, metric, value       (the unit of every comparison)
    runs/<slug>.trec    each system's run, TREC format
    significance.csv    every system against the baseline, every metric (tasks.compare.significance)
    report.md, plots/*.png
    report.html         report.md's content as one self-contained page (tasks.report.html)

``report.md``, ``significance.csv`` and the plots are derived from the first three files (and the
dataset, re-loaded by the name, split and fingerprint stored in metrics.json), so
:func:`rebuild_report` regenerates them without re-running retrieval. Pure functions over plain
data; every file is written atomically.

This module writes the folder and keeps the public API in one place; the work is split along its
seams: ``results`` (read, check and combine stored folders), ``report_data`` (the analysis behind
the report, and its plots), ``report_markdown`` (report.md) and ``recommendations``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.core.atomic import atomic_open, atomic_path, write_json
from irflow.tasks.core.config import irflow_version
from irflow.tasks.core.runs import DEFAULT_DEPTH, write_trec
from irflow.tasks.core.schema import Dataset, InputError, IrflowError
from irflow.tasks.report.coverage import coverage_block
from irflow.tasks.report.data import (
    ReportData,
    analyse,
    significance_options,
    significance_table,
    write_plots,
)
from irflow.tasks.report.html import html_report, query_view
from irflow.tasks.report.markdown import markdown_report
from irflow.tasks.report.recommendations import recommendations
from irflow.tasks.report.results import StoredResults, check_same_dataset, combine_results, load_results
from irflow.tasks.systems.specs import as_spec

SCHEMA_VERSION = 2
"""metrics.json's ``schema_version``: 2 adds the key itself (and ``memory:`` systems, given in Python); a folder
without it is of version 1, which reads the same."""


@dataclass(frozen=True)
class SystemEvaluation:
    """What one system produced on a dataset: its run, per-query values and costs."""

    system: str
    run: pd.DataFrame
    per_query: pd.DataFrame  # query_id, metric, value
    means: dict[str, float]
    cost: dict[str, Any] = field(default_factory=dict)


def dataset_summary(dataset: Dataset) -> dict[str, Any]:
    m = dataset.manifest
    missing = m.get("missing_documents") or {}
    return {
        "name": dataset.name,
        "split": dataset.split,
        "fingerprint": dataset.fingerprint,
        "documents": m.get("documents"),
        "queries": m.get("queries"),
        "judgements": m.get("judgements"),
        "grades": m.get("grades"),
        **({"missing_documents": missing} if missing.get("judgements") else {}),
    }


def metrics_document(
    dataset: Dataset,
    evaluations: list[SystemEvaluation],
    measures: list[str],
    depth: int | None,
    baseline: str | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The content of metrics.json: ``{"dataset": {...}, "systems": {SPEC: {METRIC: value}}, "baseline": SPEC, ...}``.

    ``depth`` None: each system's default (``DEFAULT_DEPTH``; a run file whole), recorded as
    ``depth: DEFAULT_DEPTH, depth_given: false``. The baseline defaults to the first system;
    ``significance`` records the test options (``options`` over :data:`SIGNIFICANCE`), so a rebuilt report
    repeats the same tests.
    """
    systems = [e.system for e in evaluations]
    baseline = str(as_spec(baseline)) if baseline is not None else (systems[0] if systems else None)
    if baseline is not None and baseline not in systems:
        raise InputError(f"baseline {baseline!r} is not one of the evaluated systems: {', '.join(systems)}")
    coverage = coverage_block({e.system: e.run for e in evaluations}, dataset.qrels, dataset.manifest.get("source"))
    return {
        "schema_version": SCHEMA_VERSION,
        "dataset": dataset_summary(dataset),
        "systems": {e.system: {m: e.means[m] for m in measures} for e in evaluations},
        "baseline": baseline,
        "significance": significance_options(**options),
        "cost": {e.system: e.cost for e in evaluations},
        "measures": measures,
        "depth": DEFAULT_DEPTH if depth is None else depth,
        "depth_given": depth is not None,
        "irflow_version": irflow_version(),
        **({"coverage": coverage} if evaluations else {}),
    }


def per_query_table(evaluations: list[SystemEvaluation]) -> pd.DataFrame:
    """All systems' per-query values: ``system``, ``query_id``, ``metric``, ``value``."""
    frames = [e.per_query.assign(system=e.system) for e in evaluations]
    table = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["system", "query_id", "metric", "value"])
    )
    return table[["system", "query_id", "metric", "value"]].astype(
        {"system": "str", "query_id": "str", "metric": "str", "value": "float64"}
    )


# writing


def build_report(
    output: str | Path,
    results: StoredResults,
    dataset: Dataset | None = None,
    *,
    comparisons: pd.DataFrame | None = None,
    notes: Sequence[str] = (),
    data: ReportData | None = None,
    **options: Any,
) -> str:
    """Write report.md, report.html, significance.csv and plots/ into ``output``; returns the markdown.
    ``data``: the analysis when it was already computed (:func:`analyse`, as ``irflow.evaluate`` does)."""
    output = Path(output)
    if data is None:
        data = analyse(results, dataset, comparisons=comparisons, notes=notes, **options)
    files = write_plots(output, data, results.document)
    text = markdown_report(results.document, data, files)
    with atomic_path(output / "significance.csv") as tmp:
        data.comparisons.to_csv(tmp, index=False)
    with atomic_open(output / "report.md", "w", encoding="utf-8") as fh:
        fh.write(text)
    view = query_view(
        data,
        results.runs,
        *((dataset.queries, dataset.qrels, dataset.corpus) if dataset is not None else ()),
    )
    plots = {f: (output / f).read_bytes() for f in files.values()}
    _write_html(output, html_report(results.document, text, plots, data, view, results.per_query))
    return text


def _write_html(output: Path, page: str) -> None:
    with atomic_open(output / "report.html", "w", encoding="utf-8") as fh:
        fh.write(page)


def results_document(
    dataset: Dataset,
    evaluations: list[SystemEvaluation],
    measures: list[str],
    depth: int | None,
    *,
    baseline: str | None = None,
    calibration: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    **options: Any,
) -> StoredResults:
    """A result folder's content, computed: the metrics document, the per-query table and the runs.

    ``labels`` (spec -> label, e.g. from ``irflow run --label``) go into metrics.json as ``labels``: the
    report and the terminal name those systems so (the others by their default labels).
    ``calibration`` (from :func:`~irflow.tasks.report.calibration.calibration_block`: the judge-only
    means corrected by human labels) goes into metrics.json as ``calibrated`` and ``calibration``.
    ``options`` are the significance tests' (permutations, bootstrap, seed, alpha, correction), recorded
    in metrics.json.
    """
    document = {**metrics_document(dataset, evaluations, measures, depth, baseline, **options), **(calibration or {})}
    evaluated = {str(as_spec(e.system)) for e in evaluations}
    if given := {s: label for s, label in (labels or {}).items() if s in evaluated}:
        document["labels"] = given
    return StoredResults(document, per_query_table(evaluations), {e.system: e.run for e in evaluations})


def run_tag(system: str) -> str:
    """A run file's tag: the spec, or its slug where the spec holds whitespace (a quoted prompt or label)."""
    return system if system and not any(c.isspace() for c in system) else as_spec(system).slug


def save_results(
    output: str | Path,
    results: StoredResults,
    dataset: Dataset | None = None,
    *,
    comparisons: pd.DataFrame | None = None,
    data: ReportData | None = None,
) -> dict[str, Any]:
    """Write every file of a result folder into ``output`` from its content; returns the metrics document.
    ``comparisons`` (from :func:`significance_table`) and ``data`` (from :func:`analyse`) are computed here
    when not given."""
    output = Path(output)
    for system, run in results.runs.items():
        write_trec(run, output / "runs" / f"{as_spec(system).slug}.trec", tag=run_tag(system))
    with atomic_path(output / "per_query.parquet") as tmp:
        results.per_query.to_parquet(tmp, index=False)
    write_json(output / "metrics.json", results.document)
    if results.runs:
        build_report(output, results, dataset, comparisons=comparisons, data=data)
    else:
        text = markdown_report(results.document)
        with atomic_open(output / "report.md", "w", encoding="utf-8") as fh:
            fh.write(text)
        _write_html(output, html_report(results.document, text, {}))
    return results.document


def write_outputs(
    output: str | Path,
    dataset: Dataset,
    evaluations: list[SystemEvaluation],
    measures: list[str],
    depth: int | None,
    *,
    baseline: str | None = None,
    comparisons: pd.DataFrame | None = None,
    calibration: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Write every result file into ``output``; returns the metrics document (:func:`results_document`, then
    :func:`save_results`)."""
    results = results_document(
        dataset, evaluations, measures, depth, baseline=baseline, calibration=calibration, labels=labels, **options
    )
    return save_results(output, results, dataset, comparisons=comparisons)


def rebuild_report(run_dir: str | Path, dataset: Dataset | None = None, *, load: bool = True, **options: Any) -> Path:
    """Rebuild report.md, report.html, significance.csv and plots of a result folder from its stored files.

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
    "results_document",
    "run_tag",
    "save_results",
    "significance_table",
    "write_outputs",
    "write_plots",
]
