"""The ``evaluate`` flow: one dataset × systems → runs, per-query metrics, costs, significance, report.

Composition only: every stage is a thin Prefect task over a pure function from ``tasks/``.
Every argument (dataset and split, specs, metric names, depth, latency runs, the output folder) and
the tracking store are checked before any expensive stage runs; results are published whole.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import pandas as pd
from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.futures import PrefectFuture, wait
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from irflow.flows.stages import embed_stage, track_task
from irflow.tasks.core import run_identity
from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.output_folder import publish
from irflow.tasks.core.runs import validate_depth
from irflow.tasks.core.schema import Dataset, DownloadError, InputError, IrflowError, UnknownNameError
from irflow.tasks.core.stop import stop_on_signal
from irflow.tasks.experiment import check_models
from irflow.tasks.ingest import EMBEDDED, check_name, list_datasets, load_dataset
from irflow.tasks.metrics import evaluate as evaluate_metrics
from irflow.tasks.metrics import mean, parse_measures
from irflow.tasks.report import write as report_stage
from irflow.tasks.report.calibration import calibration_block, check_human
from irflow.tasks.report.coverage import condensed_first
from irflow.tasks.retrieve.costs import fresh_costs, retrieval_costs
from irflow.tasks.retrieve.searchers import measure_latency, retrieve
from irflow.tasks.systems.labels import default_label
from irflow.tasks.systems.specs import as_spec, leaves, walk
from irflow.tasks.tracking.log import TrackingOptions, check_tracking

log = logging.getLogger(__name__)

DEFAULT_DATASET = "techdocs"
DEFAULT_SYSTEMS = ("bm25", "dense:minilm", "hybrid:bm25+dense:minilm")
DEFAULT_METRICS = ("nDCG@10", "nDCG@100", "R@10", "R@100", "P@10", "RR@10", "AP@100", "Success@10", "Rprec")


def _network_failure(task: Any, task_run: Any, state: Any) -> bool:
    """Retry ingestion only when a download failed; bad input fails at once."""
    return isinstance(state.result(raise_on_failure=False), DownloadError)


class SystemsFailed(IrflowError):
    """Some systems failed; the others' results were still written (and tracked)."""


def validate(dataset: str, systems: Sequence[str], metrics: Sequence[str]) -> tuple[list[str], list[str]]:
    """Canonical system specs and metric names; raises (listing the valid choices) before any work."""
    check_name(dataset)
    specs = [str(as_spec(s)) for s in systems]
    check_models(specs)  # unknown models fail here too, listing the aliases
    return specs, [m.name for m in parse_measures(metrics)]


def check_arguments(
    dataset: str, split: str | None, depth: int | None, latency_runs: int, human: str | None = None
) -> None:
    """The other arguments of an evaluation, checked with the specs and metrics before any work
    (each error names the argument and what was expected; no depth: each system's default; ``human``: the
    dataset of human judgements)."""
    try:
        if depth is not None:
            validate_depth(depth)
    except InputError:
        raise InputError(f"--depth expects an integer between 1 and 1000 (hits per query), got {depth!r}") from None
    if isinstance(latency_runs, bool) or not isinstance(latency_runs, int) or latency_runs < 0:
        raise InputError(f"--latency-runs expects an integer >= 0 (0: skip latency), got {latency_runs!r}")
    splits = dataset_splits(dataset)
    if split is not None and splits is not None and split not in splits:
        raise UnknownNameError(f"--split: {dataset} has no split {split!r}; available: {', '.join(splits) or '(none)'}")
    if human is not None:
        try:
            check_name(human)
        except UnknownNameError as exc:
            raise UnknownNameError(f"--human: {exc}") from None


def claim_output(dataset: str, output: str | Path | None, overwrite: bool, name: str) -> Path:
    """The result folder: ``output`` (refused when it holds another run's results, unless ``overwrite``)
    or, without one, a new ``results/<dataset>/<name>/`` claimed now."""
    if output is None:
        return run_identity.claim_default_output(dataset, name)
    return run_identity.check_explicit_output(output, overwrite)


def release_output(output: str | Path) -> None:
    """Remove a claimed result folder that a failed run left empty."""
    with contextlib.suppress(OSError):
        Path(output).rmdir()


def flow_run_name() -> str:
    """Prefect's name for an evaluate flow run: the ``run_name`` parameter, else dataset, systems and time."""
    from prefect.runtime import flow_run

    params = flow_run.parameters
    if params.get("run_name"):
        return str(params["run_name"])
    systems = [params.get("baseline"), *(params.get("systems") or DEFAULT_SYSTEMS)]
    return evaluation_name(str(params.get("dataset") or DEFAULT_DATASET), [s for s in systems if s])


def evaluation_name(dataset: str, systems: Sequence[str]) -> str:
    """An evaluation's run and folder name from its systems' default labels: the same from the command line
    (canonical specs) and the Prefect form (specs as typed, aliases and all)."""
    return run_identity.run_name(dataset, [default_label(s) for s in systems])


def summary_artifact(document: Mapping[str, Any]) -> None:
    """The flow run's markdown artifact ``evaluation-summary``: every system's mean of every metric."""
    from prefect.artifacts import create_markdown_artifact

    measures, systems = document["measures"], document["systems"]
    rows = [f"| `{s}` | " + " | ".join(f"{v[m]:.4f}" for m in measures) + " |" for s, v in systems.items()]
    ds = document["dataset"]
    text = "\n".join(
        [
            f"**{ds['name']}** ({ds['split']}, {ds['queries']} judged queries), baseline `{document.get('baseline')}`",
            "",
            "| system | " + " | ".join(measures) + " |",
            "|---|" + "---:|" * len(measures),
            *rows,
        ]
    )
    create_markdown_artifact(markdown=text, key="evaluation-summary", description="mean of every metric per system")


def _run_ids(name: str) -> dict[str, Any]:
    """The run's identity for metrics.json: its name and the Prefect flow run (id, and UI URL when a UI is known)."""
    from prefect import runtime
    from prefect.settings import PREFECT_UI_URL

    ids: dict[str, Any] = {"name": name, "prefect_flow_run_id": runtime.flow_run.id}
    if PREFECT_UI_URL.value() and runtime.flow_run.id:
        ids["prefect_flow_run_url"] = runtime.flow_run.ui_url
    return {k: v for k, v in ids.items() if v}


def dataset_splits(name: str) -> list[str] | None:
    """The splits ``name`` can be evaluated on, known without ingesting anything (None: not known yet)."""
    if name in EMBEDDED:
        return sorted(p.stem for p in (EMBEDDED[name] / "qrels").glob("*.tsv"))
    for row in list_datasets():
        if row["name"] == name:
            return list(row.get("splits") or row["stored"]) or None
    return None


def system_task_name(stage: str) -> Callable[[], str]:
    """A per-system task run's name: the stage and the system's label (``retrieve dense:all-MiniLM-L6-v2``)."""

    def name() -> str:
        from prefect.runtime import task_run

        return f"{stage} {default_label(str(task_run.parameters.get('system', '?')))}"

    return name


@task(name="ingest", retries=2, retry_delay_seconds=10, retry_condition_fn=_network_failure, cache_policy=NONE)
def ingest_task(name: str, split: str | None) -> Dataset:
    return load_dataset(name, split)


@task(name="retrieve", task_run_name=system_task_name("retrieve"), cache_policy=NONE)
def retrieve_task(dataset: Dataset, system: str, depth: int | None) -> Any:
    return retrieve(dataset, system, depth)


@task(name="latency", task_run_name=system_task_name("latency"), cache_policy=NONE)
def latency_task(dataset: Dataset, system: str, depth: int | None, num_runs: int, seed: int = 0) -> dict[str, Any]:
    latency = measure_latency(dataset, system, depth=depth, num_runs=num_runs, seed=seed)
    return {k: v for k, v in vars(latency).items() if k not in ("system", "info")}


@task(name="metrics", task_run_name=system_task_name("metrics"), cache_policy=NONE)
def metrics_task(
    dataset: Dataset,
    system: str,
    result: Any,
    measures: list[str],
    cost: dict[str, Any],
    encodes: Sequence[Mapping[str, Any]] = (),
) -> report_stage.SystemEvaluation:
    """Per-query metrics and the cost block (``encodes``: the embed stage's records of the system's corpus
    encodings, whose API calls are part of its cost)."""
    per_query = evaluate_metrics(result.run, dataset.qrels, measures)
    cost = {
        "retrieve_seconds": result.search_seconds,
        "prepare_seconds": result.prepare_seconds,
        **retrieval_costs(result.info, encodes),
        **cost,
    }
    cost = fresh_costs(cost, result.info, encodes)  # a cached stage says so and carries no timing
    return report_stage.SystemEvaluation(system, result.run, per_query, mean(per_query), cost)


def latency_stage(data: Dataset, system: str, depth: int | None, latency_runs: int, seed: int) -> dict[str, Any]:
    """The system's latency record; a failing measurement (a service gone after retrieval) fails the
    system's latency only: ``latency_error`` names the reason and its retrieval and metrics are kept."""
    if latency_runs <= 0:
        return {}
    try:
        return latency_task(data, system, depth, latency_runs, seed)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.warning("latency of %s failed, its other results are kept: %s", system, error)
        return {"latency_error": error}


def embedding_failures(specs: Sequence[str], embedded: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The systems that need an encoding that failed with a named error, and that error."""
    final = {dense: e["error"] for dense, e in embedded.items() if e.get("final")}
    return {system: final[str(node)] for system in specs for node in walk(as_spec(system)) if str(node) in final}


@task(name="significance", cache_policy=NONE)
def significance_task(
    evaluations: list[report_stage.SystemEvaluation], measures: list[str], baseline: str, seed: int = 0
) -> pd.DataFrame:
    return report_stage.significance_table(report_stage.per_query_table(evaluations), measures, baseline, seed=seed)


@task(name="report", cache_policy=NONE)
def report_task(
    output: str,
    dataset: Dataset,
    evaluations: list[report_stage.SystemEvaluation],
    measures: list[str],
    depth: int | None,
    baseline: str | None = None,
    comparisons: pd.DataFrame | None = None,
    seed: int = 0,
    calibration: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Write the result files into a temporary folder and publish it as ``output`` in one rename."""
    with publish(output) as build:
        document = report_stage.write_outputs(
            build,
            dataset,
            evaluations,
            measures,
            depth,
            baseline=baseline,
            comparisons=comparisons,
            calibration=calibration,
            labels=labels,
            seed=seed,
        )
    return document


@task(name="calibrate", cache_policy=NONE)
def calibrate_task(
    evaluations: list[report_stage.SystemEvaluation], human: Dataset, measures: list[str], baseline: str
) -> dict[str, Any]:
    """The judge-only means calibrated by ``human``'s judgements (PPI++): the runs scored again under them."""
    judge = report_stage.per_query_table(evaluations)
    runs = {e.system: e.run for e in evaluations}
    return calibration_block(judge, runs, human.qrels, measures, baseline, human.name)


# one stage at a time by default (`--task-runner dask`: with_options); cast as Prefect does for its own default
@flow(
    name="evaluate",
    flow_run_name=flow_run_name,
    task_runner=cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=1)),
)
def evaluate_flow(
    dataset: str = DEFAULT_DATASET,
    systems: Sequence[str] = DEFAULT_SYSTEMS,
    metrics: Sequence[str] = DEFAULT_METRICS,
    split: str | None = None,
    depth: int | None = None,
    output: str | None = None,
    latency_runs: int = 3,
    baseline: str | None = None,
    seed: int = 0,
    tracking: TrackingOptions = TrackingOptions(),
    strict: bool = True,
    overwrite: bool = False,
    run_name: str | None = None,
    human: str | None = None,
) -> dict[str, Any]:
    """Evaluate ``systems`` on ``dataset``; returns the metrics document also written to ``output``.

    Every system is compared with ``baseline`` (default: the first system; added if not listed).
    A failing system does not lose the others: their results are written and tracked, then the
    flow fails naming it (``strict=False``: the document lists it under ``failed`` instead).
    The run's name (``run_name``, default dataset, systems and time) names the Prefect flow run, the
    MLflow run and the default result folder ``results/<dataset>/<name>/``; ``output`` holding another
    run's results is refused unless ``overwrite``. With ``human`` (a dataset of human judgements of some of
    ``dataset``'s queries, whose own judgements are then a judge's), every mean is also calibrated (PPI++).
    """
    from prefect import runtime

    specs, measures = validate(dataset, [baseline, *systems] if baseline else systems, metrics)
    specs = list(dict.fromkeys(specs))
    check_arguments(dataset, split, depth, latency_runs, human)
    name = run_name or runtime.flow_run.name or evaluation_name(dataset, specs)
    claimed = output is None
    output = str(claim_output(dataset, output, overwrite, name))
    try:
        with stop_on_signal():  # SIGTERM stops the stages running in worker threads too (an encode)
            return _evaluate(
                dataset, specs, measures, split, depth, output, latency_runs, seed, tracking, strict, name, human
            )
    finally:
        if claimed:
            release_output(output)  # only when the run left it empty


def _evaluate(
    dataset: str,
    specs: list[str],
    measures: list[str],
    split: str | None,
    depth: int | None,
    output: str,
    latency_runs: int,
    seed: int,
    tracking: TrackingOptions,
    strict: bool,
    name: str,
    human: str | None = None,
) -> dict[str, Any]:
    if tracking.enabled:  # a store that cannot be written fails now, naming its URI, before any stage runs
        check_tracking(experiment=tracking.experiment)
        tracking = tracking.model_copy(update={"run_name": name, "started_ms": int(time.time() * 1000)})
    data = ingest_task(dataset, split)
    human_data = ingest_task(human, split) if human is not None else None
    if human_data is not None:
        check_human(data, human_data)
    measures = condensed_first(data.manifest.get("source", {}), measures)  # click-derived or pooled judgements
    embedded = embed_stage(data, specs)
    failed = embedding_failures(specs, embedded)
    runs = {s: retrieve_task.submit(data, s, depth) for s in specs if s not in failed}  # in parallel on Dask
    wait(list(runs.values()))
    evaluations, infos = [], {}
    for system, run in runs.items():
        try:
            result = run.result()
        except Exception as exc:
            failed[system] = f"{type(exc).__name__}: {exc}"
            continue
        infos[system] = result.info
        cost = latency_stage(data, system, depth, latency_runs, seed)
        encodes = [embedded[str(leaf)] for leaf in leaves(as_spec(system)) if str(leaf) in embedded]
        evaluations.append(metrics_task(data, system, result, measures, cost, encodes))
    if not evaluations:
        raise SystemsFailed("every system failed: " + "; ".join(f"{s}: {e}" for s, e in failed.items()))
    base = specs[0] if specs[0] not in failed else evaluations[0].system
    comparisons = significance_task(evaluations, measures, base, seed)
    calibration = calibrate_task(evaluations, human_data, measures, base) if human_data is not None else None
    document = report_task(
        output, data, evaluations, measures, depth, base, comparisons, seed, calibration, tracking.labels
    )
    document = {**document, "run": _run_ids(name)}
    summary_artifact(document)
    if run_identity.is_default_output(dataset, output):
        run_identity.point_latest(output)
    if tracking.enabled:
        document = {**document, "mlflow": track_task(output, tracking, infos, failed, embedded, seed)}
    if failed:
        document = {**document, "failed": failed}
    write_json(Path(output) / "metrics.json", document)  # names the run, its MLflow run and the failed systems
    if failed:
        if strict:
            raise SystemsFailed(
                f"{len(failed)} of {len(specs)} systems failed ("
                + "; ".join(f"{s}: {e}" for s, e in failed.items())
                + f"); the others' results are in {output}"
            )
    return document
