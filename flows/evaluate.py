"""The ``evaluate`` flow: one dataset × systems → runs, per-query metrics, costs, report.

Composition only: every stage is a thin Prefect task over a pure function from ``tasks/``.
Specs, metric names and the dataset name are validated before any expensive stage runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE

from tasks import report as report_stage
from tasks.ingest import check_name, load_dataset
from tasks.metrics import evaluate as evaluate_metrics
from tasks.metrics import mean, parse_measures
from tasks.retrieve import measure_latency, retrieve
from tasks.schema import Dataset, DownloadError
from tasks.systems import as_spec

DEFAULT_DATASET = "techdocs"
DEFAULT_SYSTEMS = ("bm25", "dense:minilm", "hybrid:bm25+dense:minilm")
DEFAULT_METRICS = ("nDCG@10", "nDCG@100", "R@10", "R@100", "P@10", "RR@10", "AP@100", "Success@10", "Rprec")


def default_output(dataset: str) -> Path:
    return Path("results") / dataset.replace("/", "_")


def _network_failure(task: Any, task_run: Any, state: Any) -> bool:
    """Retry ingestion only when a download failed; bad input fails at once."""
    return isinstance(state.result(raise_on_failure=False), DownloadError)


def validate(dataset: str, systems: Sequence[str], metrics: Sequence[str]) -> tuple[list[str], list[str]]:
    """Canonical system specs and metric names; raises (listing the valid choices) before any work."""
    check_name(dataset)
    return [str(as_spec(s)) for s in systems], [m.name for m in parse_measures(metrics)]


@task(name="ingest", retries=2, retry_delay_seconds=10, retry_condition_fn=_network_failure, cache_policy=NONE)
def ingest_task(name: str, split: str | None) -> Dataset:
    return load_dataset(name, split)


@task(name="retrieve", task_run_name="retrieve {system}", cache_policy=NONE)
def retrieve_task(dataset: Dataset, system: str, depth: int) -> Any:
    return retrieve(dataset, system, depth)


@task(name="latency", task_run_name="latency {system}", cache_policy=NONE)
def latency_task(dataset: Dataset, system: str, depth: int, num_runs: int) -> dict[str, Any]:
    latency = measure_latency(dataset, system, depth=depth, num_runs=num_runs)
    return {k: v for k, v in vars(latency).items() if k not in ("system", "info")}


@task(name="metrics", task_run_name="metrics {system}", cache_policy=NONE)
def metrics_task(dataset: Dataset, system: str, result: Any, measures: list[str],
                 cost: dict[str, Any]) -> report_stage.SystemEvaluation:
    per_query = evaluate_metrics(result.run, dataset.qrels, measures)
    cost = {"retrieve_seconds": result.search_seconds, "prepare_seconds": result.prepare_seconds, **cost}
    return report_stage.SystemEvaluation(system, result.run, per_query, mean(per_query), cost)


@task(name="report", cache_policy=NONE)
def report_task(output: str, dataset: Dataset, evaluations: list[report_stage.SystemEvaluation],
                measures: list[str], depth: int) -> dict[str, Any]:
    return report_stage.write_outputs(output, dataset, evaluations, measures, depth)


@flow(name="evaluate")
def evaluate_flow(dataset: str = DEFAULT_DATASET, systems: Sequence[str] = DEFAULT_SYSTEMS,
                  metrics: Sequence[str] = DEFAULT_METRICS, split: str | None = None, depth: int = 100,
                  output: str | None = None, latency_runs: int = 3) -> dict[str, Any]:
    """Evaluate ``systems`` on ``dataset``; returns the metrics document also written to ``output``."""
    specs, measures = validate(dataset, systems, metrics)
    data = ingest_task(dataset, split)
    evaluations = []
    for system in specs:
        result = retrieve_task(data, system, depth)
        cost = latency_task(data, system, depth, latency_runs) if latency_runs > 0 else {}
        evaluations.append(metrics_task(data, system, result, measures, cost))
    return report_task(output or str(default_output(dataset)), data, evaluations, measures, depth)
