"""The ``abtest`` flow: an online A/B test's log → per-arm metrics at the randomisation unit → result folder
→ MLflow (the command: ``irflow.cli.abtest``; the statistics: ``tasks.online``).

Composition only: read and check the log, analyse (delta-method intervals, sample-ratio mismatch),
optionally the sequential test day by day, publish the folder whole, then one MLflow run in the
experiment ``irflow-abtest`` with the settings, every figure and the folder's files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE

from irflow.flows.stages import link_to_mlflow, prefect_tags
from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.output_folder import publish
from irflow.tasks.online import abtest, abtest_report, abtest_sequential
from irflow.tasks.online.abtest_log import AbLog, read_ab_log

EXPERIMENT = "irflow-abtest"


@dataclass(frozen=True)
class AbTestConfig:
    """What ``irflow abtest`` was asked: the log, its unit column, the control arm, the planned split, the
    sequential test (with its τ) and the result folder."""

    log: str
    output: str
    unit: str = "user_id"
    control: str | None = None
    treatment_share: float = 0.5
    sequential: bool = False
    tau: float = abtest_sequential.DEFAULT_TAU


@task(name="read A/B log", cache_policy=NONE)
def read_task(config: AbTestConfig) -> AbLog:
    return read_ab_log(config.log, config.unit)


@task(name="analyse A/B test", cache_policy=NONE)
def analyse_task(log: AbLog, config: AbTestConfig) -> dict[str, Any]:
    return abtest.analyse(log, config.control, config.treatment_share)


@task(name="sequential test", cache_policy=NONE)
def sequential_task(log: AbLog, analysis: dict[str, Any], tau: float) -> dict[str, Any]:
    return abtest_sequential.sequential(log, analysis["control"], analysis["treatment"], list(analysis["metrics"]), tau)


@task(name="write A/B report", cache_policy=NONE)
def write_task(config: AbTestConfig, analysis: dict[str, Any], sequential: dict[str, Any] | None) -> dict[str, Any]:
    """Build the folder in a temporary place and publish it as ``config.output`` in one rename."""
    with publish(config.output) as build:
        return abtest_report.write_abtest(build, analysis, sequential)


def mlflow_metrics(document: dict[str, Any]) -> dict[str, float]:
    """Flat MLflow metrics: ``<metric>.control|treatment|difference|ci_low|ci_high|p_value``, ``srm.*``."""
    from irflow.tasks.tracking.log import mlflow_key

    ab = document["abtest"]
    out: dict[str, float] = {
        "srm.p_value": ab["srm"]["p_value"],
        "srm.mismatch": float(ab["srm"]["mismatch"]),
        "srm.observed_share": ab["srm"]["observed_share"],
        "trustworthy": float(ab["trustworthy"]),
    }
    for arm, n in ab["units"].items():
        out[mlflow_key("units", arm)] = n
    for name, m in ab["metrics"].items():
        for key in ("control", "treatment", "difference", "p_value", "relative", "design_effect"):
            out[f"{name}.{key}"] = m[key]
        out[f"{name}.ci_low"], out[f"{name}.ci_high"] = m["ci"]
    for name, values in (document.get("sequential") or {}).get("metrics", {}).items():
        out[f"{name}.always_valid_p_value"] = values["final_always_valid_p_value"]
    return {k: float(v) for k, v in out.items()}


@task(name="track A/B test", cache_policy=NONE)
def track_task(config: AbTestConfig, document: dict[str, Any]) -> str:
    """One MLflow run: settings as params, the figures as metrics, the folder's files as artifacts; linked
    both ways with this flow run (tags ``prefect.flow_run_id`` and ``mlflow-run:<id>``)."""
    from irflow.tasks.tracking.log import Tracker, ending_runs, tracking_uri

    ab = document["abtest"]
    tracker = Tracker(EXPERIMENT, tracking_uri())
    with ending_runs():
        run_id = tracker.start(f"abtest {Path(config.log).name}", "abtest")
        tracker.log(
            run_id,
            params={
                "log": str(Path(config.log).resolve()),
                "unit": config.unit,
                "control": ab["control"],
                "treatment": ab["treatment"],
                "treatment_share": config.treatment_share,
                "metrics": ", ".join(ab["metrics"]),
                "sequential": config.sequential,
                "tau": config.tau if config.sequential else None,
                "output": str(Path(config.output).resolve()),
                "irflow.version": document["irflow_version"],
            },
            metrics=mlflow_metrics(document),
            tags={**prefect_tags(), "irflow.abtest_trustworthy": str(ab["trustworthy"]).lower()},
        )
        tracker.log_files(run_id, config.output, files=("metrics.json", "report.md", "report.html"))
        tracker.end(run_id)
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
def abtest_flow(config: AbTestConfig, track: bool = True) -> dict[str, Any]:
    """Analyse the A/B log ``config.log``; returns metrics.json's content (with ``mlflow`` when tracked)."""
    if track:
        from irflow.tasks.tracking.log import check_tracking

        check_tracking(experiment=EXPERIMENT)  # an unwritable store fails before any work
    log = read_task(config)
    analysis = analyse_task(log, config)
    sequential = sequential_task(log, analysis, config.tau) if config.sequential else None
    document = write_task(config, analysis, sequential)
    if track:
        run_id = track_task(config, document)
        document["mlflow"] = {"run_id": run_id, "experiment": EXPERIMENT}
        write_json(Path(config.output) / "metrics.json", document)
    return document


__all__ = ["EXPERIMENT", "AbTestConfig", "abtest_flow", "mlflow_metrics"]
