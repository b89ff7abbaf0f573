"""The ``abtest`` flow: an online A/B test's log → per-arm metrics at the randomisation unit → result folder
→ MLflow (the command: ``irflow.cli.abtest``; the statistics: ``tasks.online``).

Composition only (:func:`irflow.api.abtest.run_abtest`, its stages as tasks): read and check the log,
analyse (delta-method intervals, sample-ratio mismatch), optionally the sequential test day by day,
publish the folder whole, then one MLflow run in the experiment ``irflow-abtest`` (or the one given) with the settings,
every figure and the folder's files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE

from irflow.api.abtest import ABTEST_EXPERIMENT as EXPERIMENT
from irflow.api.abtest import AbTestConfig, AbTestStages, run_abtest, track_abtest
from irflow.api.abtest import abtest_mlflow_metrics as mlflow_metrics
from irflow.flows.stages import link_to_mlflow, prefect_tags
from irflow.tasks.core import run_identity
from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.output_folder import publish
from irflow.tasks.online import abtest, abtest_report, abtest_sequential
from irflow.tasks.online.abtest_log import read_ab_log

STAGES = AbTestStages(
    read=task(name="read A/B log", cache_policy=NONE)(read_ab_log),
    analyse=task(name="analyse A/B test", cache_policy=NONE)(abtest.analyse),
    sequential=task(name="sequential test", cache_policy=NONE)(abtest_sequential.sequential),
)
"""The composition's stages (:func:`irflow.api.abtest.run_abtest`) as Prefect tasks."""


@task(name="write A/B report", cache_policy=NONE)
def write_task(config: AbTestConfig, analysis: dict[str, Any], sequential: dict[str, Any] | None) -> dict[str, Any]:
    """Build the folder in a temporary place and publish it as ``config.output`` in one rename."""
    with publish(config.output) as build:
        return abtest_report.write_abtest(build, analysis, sequential)


@task(name="track A/B test", cache_policy=NONE)
def track_task(config: AbTestConfig, document: dict[str, Any], experiment: str = EXPERIMENT) -> str:
    """One MLflow run (:func:`irflow.api.abtest.track_abtest`) linked both ways with this flow run (tags
    ``prefect.flow_run_id`` and ``mlflow-run:<id>``)."""
    tracker, run_id = track_abtest(config, document, prefect_tags(), experiment=experiment)
    link_to_mlflow(tracker, run_id, f"A/B test {Path(config.log).name}")
    return run_id


def abtest_flow_run_name() -> str:
    """Prefect's name for an abtest flow run: ``abtest_<log>_<time>`` (not a random pair of words)."""
    import datetime as dt

    from prefect.runtime import flow_run

    config = flow_run.parameters.get("config")
    fields = config if isinstance(config, dict) else vars(config) if config is not None else {}
    log = Path(str(fields.get("log") or "log")).stem
    return f"abtest_{log}_{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


@flow(name="abtest", flow_run_name=abtest_flow_run_name)
def abtest_flow(config: AbTestConfig, track: bool = True, experiment: str = EXPERIMENT) -> dict[str, Any]:
    """Analyse the A/B log ``config.log``; returns metrics.json's content (with ``mlflow`` when tracked: one run
    in the MLflow experiment ``experiment``)."""
    if track:
        from irflow.tasks.tracking.log import check_tracking

        check_tracking(experiment=experiment)  # an unwritable store fails before any work
    log = STAGES.read(config.log, config.unit)
    analysis, sequential = run_abtest(log, config, STAGES)
    document = write_task(config, analysis, sequential)
    if run_identity.is_default_output(None, config.output, "abtest"):
        run_identity.point_latest(config.output)  # results/abtest/latest: the last A/B test
    if track:
        run_id = track_task(config, document, experiment)
        document["mlflow"] = {"run_id": run_id, "experiment": experiment}
        write_json(Path(config.output) / "metrics.json", document)
    return document


__all__ = ["EXPERIMENT", "AbTestConfig", "abtest_flow", "mlflow_metrics"]
