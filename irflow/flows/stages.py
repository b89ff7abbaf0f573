"""Prefect stages shared by the flows: embed (sharded on Dask, cached across runs), track (MLflow),
the task runner, and the links between a Prefect flow run and its MLflow runs.

Thin wrappers over ``tasks.embed.sharding`` and ``tasks.tracking``; composition stays in the flows.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NONE
from prefect.context import FlowRunContext
from prefect.futures import wait

from irflow.api.evaluation import Evaluation
from irflow.tasks.core.atomic import process_gone, this_process
from irflow.tasks.core.schema import Dataset, IrflowError, UnknownNameError
from irflow.tasks.core.stop import stop_requested
from irflow.tasks.embed import sharding
from irflow.tasks.tracking import log as tracking

TASK_RUNNERS = ("default", "dask")
log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# embed: one task per corpus encoding; on Dask first one task per chunk range


def _job_cache_key(context: Any, inputs: dict[str, Any]) -> str:
    """Same embedding key and cache folder -> the same cached state (refreshed when files are missing)."""
    job: sharding.EmbedJob = inputs["job"]
    shard = ",".join(map(str, inputs.get("chunks", ())))
    return "embed-" + hashlib.sha256(f"{job.key_dir}|{shard}".encode()).hexdigest()[:32]


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry an encode only when it failed for no named reason: a named irflow error (bad input, a refused
    key, an API that kept failing through its own retries) would fail the same way again."""
    return not isinstance(state.result(raise_on_failure=False), IrflowError) and not stop_requested()


@task(
    name="embed",
    task_run_name="embed {job.model}",
    cache_key_fn=_job_cache_key,
    persist_result=True,
    retries=1,
    retry_condition_fn=_transient,
)
def embed_task(dataset: Dataset, job: sharding.EmbedJob) -> dict[str, Any]:
    return sharding.encode_job(dataset, job)


@task(
    name="embed-shard",
    task_run_name="embed {job.model} chunks {chunks}",
    cache_key_fn=_job_cache_key,
    persist_result=True,
    retries=1,
    retry_condition_fn=_transient,
)
def embed_shard_task(dataset: Dataset, job: sharding.EmbedJob, chunks: list[int]) -> dict[str, Any]:
    return sharding.encode_shard(dataset, job, chunks)


def parallel_workers() -> int:
    """Workers of the current flow's Dask runner (0 under the default runner)."""
    runner = getattr(FlowRunContext.get(), "task_runner", None)
    if runner is None or type(runner).__name__ != "DaskTaskRunner":
        return 0
    return max(1, len(runner.client.scheduler_info().get("workers", {})))  # the client starts on first use


def embed_stage(dataset: Dataset, systems: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Encode every corpus the systems need before retrieval; returns per dense spec what was encoded
    (``encoded``, ``seconds``) and whether Prefect served it from its cache (``cached``). A re-run of
    an unchanged evaluation is all cached: nothing is encoded. An encoding that fails is recorded
    (``error``): only the systems that need it fail, in retrieval."""
    jobs = sharding.embed_jobs(dataset, systems)
    workers = parallel_workers()

    def options(job: sharding.EmbedJob) -> dict[str, Any]:
        return {"refresh_cache": not job.complete}  # files gone -> run again, never trust a stale record

    shards = [
        (job.system, embed_shard_task.with_options(**options(job)).submit(dataset, job, chunks))
        for job in jobs
        if workers > 1 and job.chunks > 1
        for chunks in sharding.shards(job, workers)
    ]
    wait([future for _, future in shards])  # a failed shard leaves its chunks to the embed task below
    futures = {job.system: embed_task.with_options(**options(job)).submit(dataset, job) for job in jobs}
    wait(list(futures.values()))
    out: dict[str, dict[str, Any]] = {}
    for system, future in futures.items():
        try:
            out[system] = {**future.result(), "cached": future.state.name == "Cached"}
            if out[system]["cached"] and "api_calls" in out[system]:  # a record of what an earlier run paid
                out[system].update(api_calls=0, api_tokens=0)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            out[system] = {"encoded": 0, "seconds": 0.0, "cached": False, "error": error}
            if isinstance(exc, IrflowError):  # named: retrieval would fail the same way, so it is not tried
                out[system]["final"] = True
    for system, future in shards:  # the shards did the encoding: count theirs (seconds summed over workers)
        done = future.result(raise_on_failure=False)
        if isinstance(done, dict) and future.state.name != "Cached":
            out[system]["cached"] = False
            out[system]["encoded"] += done["encoded"]
            out[system]["seconds"] += done["seconds"]
            if "load_seconds" in done:
                out[system]["load_seconds"] = out[system].get("load_seconds", 0.0) + done["load_seconds"]
    return out


# ---------------------------------------------------------------------------------------------
# track


def prefect_tags() -> dict[str, str]:
    """Tags linking an MLflow run to the Prefect flow run that logged it."""
    from prefect import runtime
    from prefect.settings import PREFECT_UI_URL

    tags = {
        "prefect.flow_run_id": runtime.flow_run.id,
        "prefect.flow_run_name": runtime.flow_run.name,
        "prefect.flow_name": runtime.flow_run.flow_name,
        "prefect.deployment_id": runtime.deployment.id,
    }
    if PREFECT_UI_URL.value() and runtime.flow_run.id:  # a server with a UI, not a temporary one
        tags["prefect.flow_run_url"] = runtime.flow_run.ui_url
    return {k: str(v) for k, v in tags.items() if v}


def link_to_mlflow(tracker: tracking.Tracker, run_id: str, title: str) -> None:
    """The other direction: a tag ``mlflow-run:<id>`` on the flow run and a markdown artifact with the link."""
    from prefect import runtime
    from prefect.artifacts import create_markdown_artifact
    from prefect.client.orchestration import get_client

    url = tracker.run_url(run_id)
    where = f"[{run_id}]({url})" if url else f"`{run_id}`"
    create_markdown_artifact(
        markdown=f"**{title}** — MLflow run {where}, experiment `{tracker.experiment}`, store "
        f"`{tracking.redact(tracker.uri)}`",
        key="mlflow-run",
        description="MLflow run of this flow run",
    )
    flow_run_id = runtime.flow_run.id
    if flow_run_id:
        with get_client(sync_client=True) as client:
            current = client.read_flow_run(flow_run_id).tags
            client.update_flow_run(flow_run_id, tags=[*current, f"mlflow-run:{run_id}"])


@task(name="track", cache_policy=NONE)
def track_task(output: str, evaluation: Evaluation, options: tracking.TrackingOptions) -> Evaluation:
    """Log the result folder to MLflow (evaluation run + a run per system, :func:`irflow.api.track_evaluation`)
    and link it with this flow run."""
    from irflow.api.evaluate import track_evaluation

    tracked = track_evaluation(
        evaluation,
        output,
        experiment=options.experiment,
        run_name=options.run_name,
        parent=options.parent_run_id,
        tags=prefect_tags(),
        started_ms=options.started_ms,
    )
    assert tracked.tracking is not None
    link_to_mlflow(tracking.Tracker(options.experiment), tracked.tracking.run_id, "evaluation")
    return tracked


# ---------------------------------------------------------------------------------------------
# flow runs left RUNNING by a process that is gone

OWNER_TAG = "irflow.{}:{}"  # a flow run's tags name the process running it: irflow.host:H, irflow.pid:N, ...


def owner_tags() -> list[str]:
    """This process as flow-run tags (:func:`irflow.tasks.core.atomic.this_process`)."""
    return [OWNER_TAG.format(k, v) for k, v in this_process().items()]


def end_crashed_flow_runs() -> list[str]:
    """Mark CRASHED the flow runs left RUNNING by an irflow process of this host that no longer exists (a
    SIGKILL, the OOM killer: nothing ended them); returns their ids. Runs without irflow's owner tags,
    of other hosts or of living processes are left alone; an API that cannot be asked is logged, not raised."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    host = this_process()["host"]
    running = FlowRunFilter(
        state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.RUNNING])),
        tags=FlowRunFilterTags(all_=[OWNER_TAG.format("host", host)]),
    )
    ended: list[str] = []
    try:
        with get_client(sync_client=True) as client:
            for run in client.read_flow_runs(flow_run_filter=running, limit=200):
                owner = dict(t.removeprefix("irflow.").split(":", 1) for t in run.tags if t.startswith("irflow."))
                if process_gone(owner.get("host"), owner.get("pid"), owner.get("started")):
                    message = f"irflow process {owner.get('pid')} on {host} ended without ending this flow run"
                    client.set_flow_run_state(run.id, Crashed(message=message), force=True)
                    ended.append(str(run.id))
    except Exception as exc:
        log.warning("could not end flow runs left RUNNING: %s: %s", type(exc).__name__, exc)
    if ended:
        log.info("marked CRASHED %d flow run(s) left RUNNING by a process that is gone", len(ended))
    return ended


@contextlib.contextmanager
def owned_flow_runs() -> Iterator[None]:
    """The block's flow runs carry this process's owner tags (:func:`owner_tags`), so that a later command can
    tell a run whose process is gone (``prefect_api.ready`` marks those CRASHED: :func:`end_crashed_flow_runs`)."""
    from prefect import tags

    with tags(*owner_tags()):
        yield


# ---------------------------------------------------------------------------------------------
# task runners


def make_task_runner(kind: str = "default", address: str | None = None, workers: int | None = None) -> Any:
    """None for the flow's own runner; ``dask``: a DaskTaskRunner on ``address`` (an existing scheduler,
    e.g. ``tcp://10.0.0.5:8786``) or on a LocalCluster bound to 127.0.0.1 with its dashboard on a free port."""
    if kind not in TASK_RUNNERS:
        raise UnknownNameError(f"unknown task runner {kind!r}; valid: {', '.join(TASK_RUNNERS)}")
    if kind == "default":
        if address:
            raise UnknownNameError("a scheduler address needs --task-runner dask")
        return None
    from prefect_dask import DaskTaskRunner

    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs=local_cluster_options(workers))


WORKER_LOG_FORMAT = {  # Dask workers log through Prefect's own config: give it irflow's one format (flows.terminal)
    "PREFECT_LOGGING_FORMATTERS_STANDARD_FORMAT": "%(levelname)s %(name)s: %(message)s",
    "PREFECT_LOGGING_FORMATTERS_STANDARD_FLOW_RUN_FMT": "%(levelname)s %(name)s: [%(flow_run_name)s] %(message)s",
    "PREFECT_LOGGING_FORMATTERS_STANDARD_TASK_RUN_FMT": "%(levelname)s %(name)s: [%(task_run_name)s] %(message)s",
}


def local_cluster_options(workers: int | None = None) -> dict[str, Any]:
    """A LocalCluster on 127.0.0.1 (dashboard on a free port) whose workers report to this process's
    Prefect API, the ephemeral one included (else each worker would start a server of its own)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        api_url = str(client.api_url).rstrip("/")
    return {
        "n_workers": workers or min(2, os.cpu_count() or 1),
        "threads_per_worker": 1,
        "processes": True,
        "host": "127.0.0.1",
        "dashboard_address": "127.0.0.1:0",
        "env": {"PREFECT_API_URL": api_url, **WORKER_LOG_FORMAT},
    }


@contextlib.contextmanager
def task_runner_scope(kind: str = "default", address: str | None = None) -> Iterator[Any]:
    """A task runner shared by several flows: for ``dask`` without an address, one LocalCluster for all."""
    if kind != "dask" or address:
        yield make_task_runner(kind, address)
        return
    from distributed import LocalCluster

    with LocalCluster(**local_cluster_options()) as cluster:
        yield make_task_runner("dask", cluster.scheduler_address)


__all__ = [
    "TASK_RUNNERS",
    "embed_stage",
    "embed_task",
    "end_crashed_flow_runs",
    "link_to_mlflow",
    "make_task_runner",
    "owned_flow_runs",
    "owner_tags",
    "parallel_workers",
    "prefect_tags",
    "task_runner_scope",
    "track_task",
]
