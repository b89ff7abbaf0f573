"""The ``evaluate`` flow: one dataset × systems → runs, per-query metrics, costs, significance, report.

Composition only, and not even that: the stages are composed once, in :func:`irflow.api.run_evaluation`;
this flow hands it :class:`PrefectStages`, whose methods run the same pure functions as Prefect tasks
(retries, caching, Dask), then publishes the result folder, tracks it in MLflow and links the two. Every
argument is checked (:func:`irflow.api.make_request`) before any stage runs; results are published whole.
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

from irflow.api.evaluation import Evaluation
from irflow.api.pipeline import Stages, SystemsFailed, retrieve_entry, run_evaluation, system_evaluation
from irflow.api.request import (
    DEFAULT_DATASET,
    DEFAULT_METRICS,
    DEFAULT_SYSTEMS,
    EvaluationRequest,
    SystemEntry,
)
from irflow.flows.request import request_of
from irflow.flows.stages import embed_stage, track_task
from irflow.tasks.core import run_identity
from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.schema import Dataset, DownloadError
from irflow.tasks.core.stop import stop_on_signal
from irflow.tasks.experiment import check_models
from irflow.tasks.ingest import check_name, load_dataset
from irflow.tasks.metrics import parse_measures
from irflow.tasks.report import write as report_stage
from irflow.tasks.retrieve.searchers import measure_latency, retrieve
from irflow.tasks.systems.labels import default_label
from irflow.tasks.systems.specs import SystemSpec, as_spec
from irflow.tasks.tracking.log import TrackingOptions, check_tracking

log = logging.getLogger(__name__)


def _network_failure(task: Any, task_run: Any, state: Any) -> bool:
    """Retry ingestion only when a download failed; bad input fails at once."""
    return isinstance(state.result(raise_on_failure=False), DownloadError)


def validate(dataset: str, systems: Sequence[str], metrics: Sequence[str]) -> tuple[list[str], list[str]]:
    """Canonical system specs and metric names; raises (listing the valid choices) before any work."""
    check_name(dataset)
    specs = [str(as_spec(s)) for s in systems]
    check_models(specs)  # unknown models fail here too, listing the aliases
    return specs, [m.name for m in parse_measures(metrics)]


def claim_output(
    dataset: str, output: str | Path | None, overwrite: bool, name: str, kind: str = run_identity.EVALUATION
) -> Path:
    """The result folder: ``output`` (refused when it holds another run's results, unless ``overwrite``)
    or, without one, a new folder ``<name>/`` claimed now in the default root of ``kind``
    (``results/<dataset>/`` for an evaluation, ``results/<dataset>/rag/`` for RAG: see ``run_identity``)."""
    if output is None:
        return run_identity.claim_default_output(dataset, name, kind)
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


def system_task_name(stage: str) -> Callable[[], str]:
    """A per-system task run's name: the stage and the system's label (``retrieve dense:all-MiniLM-L6-v2``)."""

    def name() -> str:
        from prefect.runtime import task_run

        return f"{stage} {default_label(task_run.parameters.get('system', '?'))}"

    return name


@task(name="ingest", retries=2, retry_delay_seconds=10, retry_condition_fn=_network_failure, cache_policy=NONE)
def ingest_task(name: str, split: str | None) -> Dataset:
    return load_dataset(name, split)


@task(name="retrieve", task_run_name=system_task_name("retrieve"), cache_policy=NONE)
def retrieve_task(dataset: Dataset, system: str | SystemSpec, depth: int | None) -> Any:
    return retrieve(dataset, system, depth)


@task(name="latency", task_run_name=system_task_name("latency"), cache_policy=NONE)
def latency_task(
    dataset: Dataset, system: str | SystemSpec, depth: int | None, num_runs: int, seed: int = 0
) -> dict[str, Any]:
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
    return system_evaluation(dataset, system, result, measures, cost, encodes)


@task(name="significance", cache_policy=NONE)
def significance_task(
    evaluations: list[report_stage.SystemEvaluation], measures: list[str], baseline: str, seed: int = 0
) -> pd.DataFrame:
    return Stages().significance(evaluations, measures, baseline, seed)


@task(name="calibrate", cache_policy=NONE)
def calibrate_task(
    evaluations: list[report_stage.SystemEvaluation], human: Dataset, measures: list[str], baseline: str
) -> dict[str, Any]:
    return Stages().calibrate(evaluations, human, measures, baseline)


@task(name="report", cache_policy=NONE)
def report_task(output: str, evaluation: Evaluation) -> None:
    """Write the result files into a temporary folder and publish it as ``output`` in one rename."""
    evaluation.save(output)


class PrefectStages(Stages):
    """The evaluation's stages as Prefect tasks: ingestion retried on a failed download, corpus encodings
    cached across runs (and sharded on Dask), the systems' retrievals submitted together (in parallel on Dask)."""

    def ingest(self, name: str, split: str | None) -> Dataset:
        return ingest_task(name, split)

    def embed(self, dataset: Dataset, specs: Sequence[str]) -> dict[str, dict[str, Any]]:
        return embed_stage(dataset, specs)

    def retrieve(self, dataset: Dataset, systems: Sequence[SystemEntry], depth: int | None) -> dict[str, Any]:
        futures = {e.key: retrieve_task.submit(dataset, e.spec, depth) for e in systems if e.source is None}
        wait(list(futures.values()))
        out: dict[str, Any] = {}
        for entry in systems:
            try:
                out[entry.key] = (
                    futures[entry.key].result() if entry.key in futures else retrieve_entry(dataset, entry, depth)
                )
            except Exception as exc:
                out[entry.key] = exc
        return out

    def latency(self, dataset: Dataset, system: SystemSpec, depth: int | None, runs: int, seed: int) -> dict[str, Any]:
        return latency_task(dataset, system, depth, runs, seed)

    def metrics(
        self,
        dataset: Dataset,
        system: str,
        result: Any,
        measures: list[str],
        cost: Mapping[str, Any],
        encodes: Sequence[Mapping[str, Any]],
    ) -> report_stage.SystemEvaluation:
        return metrics_task(dataset, system, result, measures, dict(cost), encodes)

    def significance(
        self, evaluations: list[report_stage.SystemEvaluation], measures: list[str], baseline: str, seed: int
    ) -> pd.DataFrame:
        return significance_task(evaluations, measures, baseline, seed)

    def calibrate(
        self, evaluations: list[report_stage.SystemEvaluation], human: Dataset, measures: list[str], baseline: str
    ) -> dict[str, Any]:
        return calibrate_task(evaluations, human, measures, baseline)


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
) -> Evaluation:
    """Evaluate ``systems`` on ``dataset`` (:func:`irflow.api.run_evaluation`, its stages as Prefect tasks),
    write the result folder ``output`` and track it; returns the :class:`~irflow.api.Evaluation`.

    Every system is compared with ``baseline`` (default: the first system; added if not listed).
    A failing system does not lose the others: their results are written and tracked, then the
    flow fails naming it (``strict=False``: :attr:`Evaluation.failed` lists it instead).
    The run's name (``run_name``, default dataset, systems and time) names the Prefect flow run, the
    MLflow run and the default result folder ``results/<dataset>/<name>/``; ``output`` holding another
    run's results is refused unless ``overwrite``. With ``human`` (human judgements of some of ``dataset``'s
    queries: a dataset's name or a judgements file; ``dataset``'s own judgements are then a judge's), every mean
    is also calibrated (PPI++).
    """
    from prefect import runtime

    request = request_of(
        dataset,
        systems,
        metrics,
        split=split,
        depth=depth,
        latency_runs=latency_runs,
        baseline=baseline,
        seed=seed,
        human=human,
        labels=tracking.labels,
    )
    name = run_name or runtime.flow_run.name or evaluation_name(dataset, request.specs)
    claimed = output is None
    output = str(claim_output(dataset, output, overwrite, name))
    try:
        with stop_on_signal():  # SIGTERM stops the stages running in worker threads too (an encode)
            return _evaluate(request, output, tracking, strict, name)
    finally:
        if claimed:
            release_output(output)  # only when the run left it empty


def _evaluate(
    request: EvaluationRequest, output: str, tracking: TrackingOptions, strict: bool, name: str
) -> Evaluation:
    if tracking.enabled:  # a store that cannot be written fails now, naming its URI, before any stage runs
        check_tracking(experiment=tracking.experiment)
        tracking = tracking.model_copy(update={"run_name": name, "started_ms": int(time.time() * 1000)})
    evaluation = run_evaluation(request, PrefectStages()).recorded(run=_run_ids(name))
    report_task(output, evaluation)
    summary_artifact(evaluation.to_dict())
    if run_identity.is_default_output(request.dataset_name, output):
        run_identity.point_latest(output)
    if tracking.enabled:
        evaluation = track_task(output, evaluation, tracking)
    write_json(Path(output) / "metrics.json", evaluation.to_dict())  # names the run, its MLflow run, the failed
    if evaluation.failed and strict:  # the flow run fails; the caller still gets the others' results
        raise SystemsFailed(
            f"{len(evaluation.failed)} of {len(request.specs)} systems failed ("
            + "; ".join(f"{s}: {e}" for s, e in evaluation.to_dict()["failed"].items())
            + f"); the others' results are in {output}",
            evaluation,
        )
    return evaluation
