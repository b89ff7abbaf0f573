"""The ``suite`` and ``nightly`` flows: an experiment (datasets × systems) as one MLflow parent run
with an ``evaluate`` subflow (and evaluation run) per dataset.

``nightly`` then compares with the last successful nightly run of the same configuration
(``Experiment.config_id``) and ends Failed when a metric dropped by more than the threshold with
a significant paired test after correction, naming metric, delta, p-value and the likely cause.
Beside it, the experiment's ``drift:`` checks (``flows.nightly_drift``) test whether a query log drifted
from its dataset's queries; a drift ends the run Failed with the alert (a check with ``fail: false``
only reports it), but leaves the MLflow run FINISHED: its numbers remain the next run's baseline.
Composition only: the work is in ``tasks.experiment``, ``tasks.compare.regression``, ``tasks.evalsets.drift`` and
``tasks.tracking``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from prefect import flow
from prefect.states import Completed

from irflow.flows.evaluate import SystemsFailed, evaluate_flow
from irflow.flows.nightly_drift import DriftError, drift_stage
from irflow.flows.stages import link_to_mlflow, prefect_tags, task_runner_scope
from irflow.tasks.compare import regression
from irflow.tasks.core.atomic import atomic_open, atomic_path, write_json
from irflow.tasks.core.config import package_data
from irflow.tasks.core.output_folder import check_output
from irflow.tasks.core.runs import DEFAULT_DEPTH
from irflow.tasks.core.schema import InputError, IrflowError
from irflow.tasks.experiment import Experiment, load_experiment, suite_markdown, suite_table, validate_experiment
from irflow.tasks.report.results import labelled_per_query
from irflow.tasks.tracking.log import (
    KIND,
    Tracker,
    TrackingOptions,
    check_tracking,
    common_params,
    ending_runs,
    metric_key,
    mlflow_key,
    snapshot,
)
from irflow.tasks.tracking.read import Snapshot

DEFAULT_NIGHTLY_CONFIG = "deployments/nightly.yaml"
Runner = Literal["default", "dask"]


class RegressionError(IrflowError):
    """A nightly run found a significant drop; the message names metric, delta, p-value and likely cause."""


def resolve_experiment(experiment: Experiment | dict[str, Any] | None, config: str | None) -> Experiment:
    """The experiment given as parameters, else read from ``config`` (relative paths: the working
    directory; ``deployments/nightly.yaml`` is the one irflow ships when no such file is there), else
    the defaults."""
    if experiment is not None:
        return experiment if isinstance(experiment, Experiment) else Experiment.model_validate(experiment)
    if not config:
        return Experiment()
    path = Path(config).expanduser()
    if not path.is_file() and config == DEFAULT_NIGHTLY_CONFIG:
        path = package_data("deployments", "nightly.yaml")
    if not path.is_file():
        raise InputError(
            "experiment file not found (relative paths are read from the working directory)", path=str(config)
        )
    return load_experiment(path)


@dataclass
class SuiteRun:
    """What a suite produced: its MLflow run (None untracked), a metrics document per dataset and what failed."""

    tracker: Tracker | None
    run_id: str | None
    output: Path
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def _slug(text: str) -> str:
    return mlflow_key(text).replace(".", "_")


def suite_output(experiment: Experiment, kind: str, output: str | None) -> Path:
    """The suite's result folder (default ``results/<kind>/<name>``, a new timestamped one for nightly),
    checked with each dataset's folder in it (replaced whole by its evaluation) before any stage."""
    stamp = time.strftime("%Y%m%d-%H%M%S") if kind == "nightly" else ""
    root = check_output(output or Path("results") / kind / _slug(experiment.name) / stamp, marker=None)
    for dataset in experiment.datasets:
        check_output(root / _slug(dataset), option=f"--output (dataset {dataset})")
    return root


def run_suite(
    experiment: Experiment,
    kind: str,
    output: str | None,
    task_runner: Runner = "default",
    scheduler: str | None = None,
    track: bool = True,
) -> SuiteRun:
    """Validate everything, open the parent run, evaluate each dataset as a subflow, write the suite table.

    A dataset or system that fails is recorded and the others go on. The parent run stays open
    (the caller ends it). ``track=False``: nothing is logged to MLflow (no parent run, no evaluation runs).
    """
    validate_experiment(experiment)
    root = suite_output(experiment, kind, output)
    suite = SuiteRun(None, None, root)
    if track:
        suite = _open_suite_run(experiment, kind, root)
    labels = experiment.labels()
    with task_runner_scope(task_runner, scheduler) as runner:
        for dataset in experiment.datasets:
            evaluate = evaluate_flow.with_options(**({"task_runner": runner} if runner else {}))
            try:
                document = evaluate(
                    dataset=dataset,
                    systems=experiment.specs(),
                    metrics=experiment.measures(),
                    split=experiment.split,
                    depth=experiment.depth,
                    output=str(root / _slug(dataset)),
                    latency_runs=experiment.latency_runs,
                    baseline=experiment.baseline_spec(),
                    seed=experiment.seed,
                    strict=False,
                    overwrite=True,  # the suite's own folder, checked by suite_output
                    tracking=TrackingOptions(
                        enabled=track,
                        experiment=experiment.mlflow_experiment,
                        parent_run_id=suite.run_id,
                        labels=labels,
                    ),
                ).to_dict()
            except Exception as exc:
                suite.failed[dataset] = f"{type(exc).__name__}: {exc}"
                continue
            suite.documents[dataset] = document
            suite.failed.update({f"{dataset} / {labels.get(s, s)}": e for s, e in document.get("failed", {}).items()})
    _write_suite(suite, experiment)
    return suite


def _open_suite_run(experiment: Experiment, kind: str, root: Path) -> SuiteRun:
    """The suite's MLflow parent run, opened with its params (the store checked first: a write, naming its URI)."""
    check_tracking(experiment=experiment.mlflow_experiment)
    tracker = Tracker(experiment.mlflow_experiment)
    run_id = tracker.start(
        f"{kind}: {experiment.name}",
        kind,
        tags={"irflow.config": experiment.config_id(), "irflow.config_name": experiment.name, **prefect_tags()},
    )
    tracker.log(
        run_id,
        params={
            **common_params({"seed.significance": experiment.seed, "seed.latency": experiment.seed}),
            "experiment.name": experiment.name,
            "datasets": experiment.datasets,
            "split": experiment.split or "default",
            "systems": experiment.labelled(),
            "metrics": experiment.measures(),
            "baseline": experiment.baseline_spec(),
            "depth": DEFAULT_DEPTH if experiment.depth is None else experiment.depth,
            "latency_runs": experiment.latency_runs,
            **{f"regression.{k}": v for k, v in experiment.regression.model_dump().items()},
        },
    )
    link_to_mlflow(tracker, run_id, kind)
    return SuiteRun(tracker, run_id, root)


def _write_suite(suite: SuiteRun, experiment: Experiment) -> None:
    from prefect.artifacts import create_markdown_artifact

    measures, labels = experiment.measures(), experiment.labels()
    text = suite_markdown(suite.documents, measures, labels, suite.failed)
    tables = {m: suite_table(suite.documents, m, labels) for m in measures}
    with atomic_open(suite.output / "suite.md", "w", encoding="utf-8") as fh:
        fh.write(text)
    write_json(
        suite.output / "suite.json",
        {
            "experiment": experiment.model_dump(),
            "mlflow_run_id": suite.run_id,
            "failed": suite.failed,
            "datasets": {
                d: {"systems": doc["systems"], "mlflow": doc.get("mlflow")} for d, doc in suite.documents.items()
            },
            "tables": {m: json.loads(t.to_json(orient="index")) for m, t in tables.items()},
        },
    )
    means = {
        mlflow_key("mean", label, metric_key(m)): float(v)
        for m, t in tables.items()
        for label, v in t["mean"].items()
        if pd.notna(v)
    }
    create_markdown_artifact(markdown=text, key="suite-table", description="MTEB-style table: mean over datasets")
    if suite.tracker is None or suite.run_id is None:
        return
    suite.tracker.log(
        suite.run_id,
        metrics={
            **means,
            "datasets_failed": float(sum("/" not in k for k in suite.failed)),
            "failures": float(len(suite.failed)),
        },
    )
    suite.tracker.log_files(suite.run_id, suite.output, ("suite.md", "suite.json"))


@flow(name="suite")
def suite_flow(
    experiment: Experiment | None = None,
    config: str | None = None,
    output: str | None = None,
    task_runner: Runner = "default",
    scheduler: str | None = None,
    track: bool = True,
) -> dict[str, Any]:
    """Evaluate every dataset × system of an experiment (given here or as a YAML ``config`` file);
    writes suite.md / suite.json (a table per metric with the mean over datasets) under ``output``.
    ``track=False``: nothing is logged to MLflow."""
    with ending_runs():  # an error or SIGTERM leaves no run RUNNING: FAILED or KILLED
        return _suite(resolve_experiment(experiment, config), output, task_runner, scheduler, track)


def _suite(
    exp: Experiment, output: str | None, task_runner: Runner, scheduler: str | None, track: bool
) -> dict[str, Any]:
    suite = run_suite(exp, "suite", output, task_runner, scheduler, track)
    if suite.tracker is not None and suite.run_id is not None:
        suite.tracker.end(suite.run_id, failed=bool(suite.failed))
    if suite.failed:
        where = f" and MLflow run {suite.run_id}" if suite.run_id else ""
        raise SystemsFailed(
            f"suite {exp.name!r}: "
            + "; ".join(f"{k}: {v}" for k, v in suite.failed.items())
            + f"; the other results are in {suite.output}{where}"
        )
    return {"mlflow_run_id": suite.run_id, "output": str(suite.output), "datasets": suite.documents}


@flow(name="nightly")
def nightly_flow(
    experiment: Experiment | None = None,
    config: str | None = DEFAULT_NIGHTLY_CONFIG,
    output: str | None = None,
    task_runner: Runner = "default",
    scheduler: str | None = None,
    track: bool = True,
) -> Any:
    """Run the configured suite, then compare with the last successful nightly run of the same
    configuration; a significant drop beyond the threshold fails the run (and is logged to MLflow
    and as the Prefect markdown artifact ``nightly-comparison``). ``track=False``: the last tracked nightly
    run is still read from MLflow, and this one compared with it from its result folders; nothing is logged."""
    with ending_runs():  # an error or SIGTERM leaves no run RUNNING: FAILED or KILLED
        return _nightly(resolve_experiment(experiment, config), output, task_runner, scheduler, track)


def _previous_nightly(tracker: Tracker, exp: Experiment) -> str | None:
    """The last successful nightly run of this configuration (read only: a missing experiment is not created)."""
    found = tracker.client.get_experiment_by_name(exp.mlflow_experiment)
    if found is None:
        return None
    nightly = f"tags.`{KIND}` = 'nightly' and tags.`irflow.config` = '{exp.config_id()}'"
    previous = tracker.search(nightly, max_results=1, finished=True, experiment_id=str(found.experiment_id))
    return str(previous[0].info.run_id) if previous else None


def _current(suite: SuiteRun) -> Snapshot:
    """This suite's per-query values: from its MLflow run, else (untracked) from its datasets' result folders."""
    if suite.tracker is not None and suite.run_id is not None:
        return snapshot(suite.tracker, suite.run_id)
    parts = [labelled_per_query(suite.output / _slug(d)) for d in suite.documents]
    frames = [table for table, _ in parts if len(table)]
    columns = ["dataset", "system", "query_id", "metric", "value"]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    return Snapshot(table, {key: params for _, found in parts for key, params in found.items()})


def _nightly(exp: Experiment, output: str | None, task_runner: Runner, scheduler: str | None, track: bool) -> Any:
    from prefect.artifacts import create_markdown_artifact

    suite = run_suite(exp, "nightly", output, task_runner, scheduler, track)
    drift = drift_stage(exp, suite.output)
    suite.failed.update({f"drift check {d}": e for d, e in drift.failed.items()})
    tracker, settings = suite.tracker or Tracker(exp.mlflow_experiment), exp.regression
    previous_id = _previous_nightly(tracker, exp)
    changes = pd.DataFrame(columns=regression.CHANGE_COLUMNS)
    causes: dict[tuple[str, str], list[str]] = {}
    if previous_id:
        before, after = snapshot(tracker, previous_id), _current(suite)
        changes = regression.paired_changes(
            before.per_query,
            after.per_query,
            exp.watched(),
            correction=settings.correction,
            permutations=settings.permutations,
            seed=exp.seed,
        )
        causes = {
            key: regression.likely_causes(before.params.get(key, {}), params, dataset=key[0], system=key[1])
            for key, params in after.params.items()
        }
    flagged = regression.regressions(changes, settings.threshold, settings.alpha)
    text = regression.markdown(
        changes, flagged, causes, previous=previous_id, threshold=settings.threshold, alpha=settings.alpha
    )
    message = "; ".join(
        regression.describe(row, causes.get((row["dataset"], row["system"]), ())) for row in flagged.to_dict("records")
    )
    if drift.checks:
        text += "\n" + drift.markdown()

    with atomic_open(suite.output / "nightly.md", "w", encoding="utf-8") as fh:
        fh.write(text)
    with atomic_path(suite.output / "changes.csv") as tmp:
        changes.to_csv(tmp, index=False)
    metrics = {"regressions": float(len(flagged)), "comparisons": float(len(changes)), **drift.metrics()}
    for row in changes.to_dict("records"):
        name = (row["dataset"], row["system"], metric_key(row["metric"]))
        metrics[mlflow_key("regression", "delta", *name)] = row["delta"]
        metrics[mlflow_key("regression", "p", *name)] = row["p_adjusted"]
    create_markdown_artifact(markdown=text, key="nightly-comparison", description="nightly regression and drift check")
    if suite.run_id is not None:
        _log_nightly(suite, metrics, previous_id, message, drift, regressed=bool(len(flagged)))
    drifted = "; ".join(drift.alerts())
    also = f"; drift: {drifted}" if drifted else ""
    mlflow = f"MLflow run {suite.run_id}, " if suite.run_id else ""
    if len(flagged):
        raise RegressionError(f"nightly {exp.name!r} regressed: {message} ({mlflow}compared with {previous_id}){also}")
    if suite.failed:
        raise SystemsFailed(f"nightly {exp.name!r}: " + "; ".join(f"{k}: {v}" for k, v in suite.failed.items()) + also)
    verdict = nightly_verdict(exp.name, previous_id, len(changes), settings.threshold, settings.alpha)
    if drift.checks:
        verdict += "; " + drift.verdict()
    if drift.alerts(failing=True):
        raise DriftError(f"{verdict} (MLflow run {suite.run_id})" if suite.run_id else verdict)
    result = {
        "mlflow_run_id": suite.run_id,
        "previous_run_id": previous_id,
        "output": str(suite.output),
        "comparisons": len(changes),
        "regressions": 0,
        "drift": {d: r.drift for d, r in drift.reports.items()},
        "verdict": verdict,
    }
    return Completed(message=verdict, data=result)  # the verdict is the flow run's final state message


def _log_nightly(
    suite: SuiteRun, metrics: dict[str, Any], previous_id: str | None, message: str, drift: Any, regressed: bool
) -> None:
    """The comparison's figures, tags and files on the nightly's MLflow run, which then ends."""
    tracker, run_id = suite.tracker, suite.run_id
    assert tracker is not None and run_id is not None
    tracker.log(
        run_id,
        metrics=metrics,
        tags={
            "irflow.previous_run": previous_id,
            "irflow.regression": str(regressed).lower(),
            "irflow.regression_message": message or None,
            **drift.tags(),
        },
    )
    logged = [p.name for p in sorted(suite.output.glob("drift*")) if p.is_file()]
    tracker.log_files(run_id, suite.output, ("nightly.md", "changes.csv", *logged))
    tracker.end(run_id, failed=regressed or bool(suite.failed))  # a drift alone keeps it a baseline


def nightly_verdict(name: str, previous_id: str | None, comparisons: int, threshold: float, alpha: float) -> str:
    """The verdict of a nightly run without regressions, as ``irflow nightly`` prints it and Prefect shows it."""
    if previous_id is None:
        return f"nightly {name!r}: no earlier successful nightly run of this configuration to compare with"
    return (
        f"nightly {name!r}: no regression — {comparisons} comparison(s) with run {previous_id}, none dropped by "
        f"more than {threshold} with corrected p < {alpha}"
    )


__all__ = [
    "DEFAULT_NIGHTLY_CONFIG",
    "DriftError",
    "RegressionError",
    "nightly_flow",
    "nightly_verdict",
    "resolve_experiment",
    "run_suite",
    "suite_flow",
    "suite_output",
]
