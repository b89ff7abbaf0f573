"""The ``interleave`` flow: two systems' rankings → team-draft interleaving with simulated users (or a real
interleaving log) → wins/ties/losses, Δ_AB, the sign test, the queries each test needs → result folder, MLflow.

Composition only (:func:`irflow.api.interleave.run_interleave`, its stages as tasks): the rankings come from
the evaluate flow's ingest, embed and retrieve stages (any spec kind), the statistics from
``tasks.online``, the result folder is published whole, MLflow is ``tasks.tracking``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE

from irflow.api.interleave import (
    OFFLINE_METRIC,
    USERS_PER_QUERY,
    InterleaveRequest,
    InterleaveStages,
    check_interleave,
    rankings_of,
    run_interleave,
    simulate_users,
    track_interleave,
    write_interleave,
)
from irflow.flows.evaluate import ingest_task, retrieve_task
from irflow.flows.stages import embed_stage, link_to_mlflow, prefect_tags
from irflow.tasks.core import run_identity
from irflow.tasks.core.atomic import write_json
from irflow.tasks.tracking import TrackingOptions, check_tracking

simulate_task = task(name="simulate users", cache_policy=NONE)(simulate_users)

STAGES = InterleaveStages(ingest=ingest_task, embed=embed_stage, retrieve=retrieve_task, simulate=simulate_task)
"""The composition's stages (:func:`irflow.api.interleave.run_interleave`) as Prefect tasks."""


def _track(output: Path, document: dict[str, Any], options: TrackingOptions, name: str) -> dict[str, Any]:
    """One MLflow run (:func:`irflow.api.interleave.track_interleave`), linked with this flow run."""
    tracker, run_id = track_interleave(output, document, options.experiment, name, prefect_tags())
    link_to_mlflow(tracker, run_id, "interleaving")
    return {"run_id": run_id, "experiment": tracker.experiment, "url": tracker.run_url(run_id)}


def interleave_flow_run_name() -> str:
    """Prefect's name for an interleave flow run: dataset (or the log), the two systems and the time."""
    from prefect.runtime import flow_run

    params = flow_run.parameters
    where = str(params.get("dataset") or "interleave-logs")
    return run_identity.run_name(where, ["interleave", *(params.get("systems") or ())])


@flow(name="interleave", flow_run_name=interleave_flow_run_name)
def interleave_flow(
    output: str,
    dataset: str | None = None,
    systems: Sequence[str] = (),
    clicks: str = "pbm",
    split: str | None = None,
    users: int | None = None,
    depth: int = 10,
    seed: int = 0,
    log: str | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    replicates: int = 500,
    tracking: TrackingOptions = TrackingOptions(),
) -> dict[str, Any]:
    """Interleave ``systems`` (two specs) on ``dataset`` with ``users`` simulated users (default 20 per
    query) clicking by ``clicks``; or, with ``log``, analyse a real interleaving log (``systems``, if
    given, name its two teams, A first). Writes ``output``/{metrics.json, report.md, per_query.parquet}."""
    request = check_interleave(
        InterleaveRequest(dataset, tuple(systems), clicks, split, users, depth, seed, log, alpha, power, replicates)
    )
    if tracking.enabled:
        check_tracking(experiment=tracking.experiment)
    document, per_query, name = run_interleave(request, STAGES)
    write_interleave(output, document, per_query)
    if run_identity.is_default_output(dataset, output, "interleave"):
        run_identity.point_latest(output)  # results/<dataset>/interleave/latest (results/interleave/latest)
    if tracking.enabled:
        document = {**document, "mlflow": _track(Path(output), document, tracking, tracking.run_name or name)}
        write_json(Path(output) / "metrics.json", document)
    return document


__all__ = ["OFFLINE_METRIC", "USERS_PER_QUERY", "interleave_flow", "rankings_of"]
