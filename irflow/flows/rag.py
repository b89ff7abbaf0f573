"""The ``rag`` flow: answers (a team's files, or irflow systems' top k into a generator) → RAG metrics,
paired tests, report, MLflow.

Composition only (:func:`irflow.api.rag_pipeline.run_rag`), a task per stage over the pure functions of
``irflow.api.rag_pipeline`` and ``tasks.rag``: ingest, embed and retrieve (as ``evaluate``'s), answers, generate
(one per configuration), score, significance, report, track.
Every argument is checked before any expensive stage; results are published whole.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from prefect import flow, runtime, task
from prefect.cache_policies import NONE
from prefect.futures import PrefectFuture
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from irflow.api import rag_pipeline as rag_api
from irflow.api.rag_pipeline import RagStages, run_rag
from irflow.api.rag_request import DEFAULT_K, MAX_K, RagRequest, configuration_names, validate_rag
from irflow.flows.evaluate import claim_output, ingest_task, release_output, retrieve_task, system_task_name
from irflow.flows.stages import embed_stage, link_to_mlflow, prefect_tags
from irflow.tasks import tracking
from irflow.tasks.core import run_identity
from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.stop import stop_on_signal
from irflow.tasks.rag.generate import Generator
from irflow.tasks.tracking.log import TrackingOptions, check_tracking
from irflow.tasks.tracking.rag import log_rag

answers_task = task(name="answers", task_run_name="answers {name}", cache_policy=NONE)(rag_api.read_answers_file)
generate_task = task(name="generate", task_run_name=system_task_name("generate"), cache_policy=NONE)(
    rag_api.generate_answers
)
score_task = task(name="score", cache_policy=NONE)(rag_api.score_answers)
significance_task = task(name="significance", cache_policy=NONE)(rag_api.significance)
calibrate_task = task(name="calibrate", cache_policy=NONE)(rag_api.calibrate)
report_task = task(name="report", cache_policy=NONE)(rag_api.write_rag)

STAGES = RagStages(
    ingest=ingest_task,
    embed=embed_stage,
    retrieve=retrieve_task,
    answers=answers_task,
    generate=generate_task,
    score=score_task,
    significance=significance_task,
    calibrate=calibrate_task,
)
"""The composition's stages (:func:`irflow.api.rag_pipeline.run_rag`) as Prefect tasks."""


@task(name="track", cache_policy=NONE)
def track_task(output: str, options: TrackingOptions, seed: int) -> dict[str, Any]:
    """Log the result folder to MLflow (evaluation run + a run per configuration), linked with this flow run."""
    tracker = tracking.Tracker(options.experiment)
    logged = log_rag(
        tracker,
        output,
        run_name=options.run_name or Path(output).name,
        tags=prefect_tags(),
        seed=seed,
        start_time=options.started_ms,
    )
    link_to_mlflow(tracker, logged.run_id, "evaluation")
    return {"run_id": logged.run_id, "experiment": tracker.experiment, "systems": logged.systems, "url": logged.url}


def rag_flow_run_name() -> str:
    """Prefect's name for a rag flow run: the ``run_name`` parameter, else dataset, configurations and time
    (the run's MLflow and folder name too)."""
    from prefect.runtime import flow_run

    params = flow_run.parameters
    if params.get("run_name"):
        return str(params["run_name"])
    configurations = list(params.get("systems") or ()) or configuration_names(params.get("answers") or ())
    return run_identity.run_name(str(params.get("dataset") or "techdocs"), ["rag", *configurations])


@flow(
    name="rag",
    flow_run_name=rag_flow_run_name,
    task_runner=cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=1)),
)
def rag_flow(
    dataset: str = "techdocs",
    systems: Sequence[str] = (),
    answers: Sequence[str] = (),
    generator: str | None = None,
    k: int = DEFAULT_K,
    metrics: Sequence[str] | None = None,
    split: str | None = None,
    output: str | None = None,
    baseline: str | None = None,
    judge: str | None = None,
    embedder: str | None = None,
    judge_repeats: int = 1,
    human: str | None = None,
    seed: int = 0,
    tracking: TrackingOptions = TrackingOptions(),
    overwrite: bool = False,
    run_name: str | None = None,
) -> dict[str, Any]:
    """Evaluate the answers of every configuration on ``dataset``; returns the metrics document also written
    to ``output`` (default a new ``results/<dataset>/rag/<run name>/``, and ``rag/latest`` points at it)."""
    specs, parsed, chosen, names, base = validate_rag(
        dataset, systems, answers, generator, k, metrics, judge, judge_repeats, baseline, human
    )
    name = run_name or runtime.flow_run.name or run_identity.run_name(dataset, ["rag", *names])
    claimed = output is None
    output = str(claim_output(dataset, output, overwrite, name, "rag"))
    try:
        with stop_on_signal():
            return _rag(
                dataset,
                specs,
                list(answers),
                parsed,
                k,
                chosen,
                names,
                split,
                output,
                base or names[0],
                judge,
                embedder,
                judge_repeats,
                seed,
                tracking,
                name,
                human,
            )
    finally:
        if claimed:
            release_output(output)


def _rag(
    dataset: str,
    specs: list[str],
    answers: list[str],
    generator: Generator | None,
    k: int,
    metrics: list[str],
    names: list[str],
    split: str | None,
    output: str,
    baseline: str,
    judge: str | None,
    embedder: str | None,
    repeats: int,
    seed: int,
    tracking: TrackingOptions,
    name: str,
    human: str | None = None,
) -> dict[str, Any]:
    if tracking.enabled:
        check_tracking(experiment=tracking.experiment)
        tracking = tracking.model_copy(update={"run_name": name, "started_ms": int(time.time() * 1000)})
    request = RagRequest(
        dataset,
        tuple(specs),
        tuple(answers),
        generator,
        k,
        tuple(metrics),
        tuple(names),
        split,
        baseline,
        judge,
        embedder,
        repeats,
        seed,
        name,
        human,
    )
    parts = run_rag(request, STAGES)
    document = report_task(output, parts, metrics, baseline)
    document = {**document, "output": output}
    if run_identity.is_default_output(dataset, output, "rag"):  # results/<dataset>/rag/latest
        run_identity.point_latest(output)
    if tracking.enabled:
        document = {**document, "mlflow": track_task(output, tracking, seed)}
        write_json(Path(output) / "metrics.json", document)
    with contextlib.suppress(Exception):
        document["run"]["prefect_flow_run_id"] = runtime.flow_run.id
    return document


__all__ = ["DEFAULT_K", "MAX_K", "configuration_names", "rag_flow", "validate_rag"]
