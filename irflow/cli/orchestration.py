"""CLI pieces for orchestration and tracking: ``irflow suite``, ``irflow nightly`` (``irflow compare`` is
:mod:`irflow.cli.compare`) and the ``irflow run`` options ``--experiment``, ``--no-track``, ``--seed``,
``--task-runner``, ``--scheduler``. Wired into ``flows.cli`` with::

    add_run_options(run_parser); add_orchestration_parsers(subparsers)
    flow, extra = configure_run(args, preload)   # in cmd_run, before the flow is called
    document = flow(..., **extra)

Imports stay lazy so ``irflow --help`` answers at once.
"""

from __future__ import annotations

import argparse
from typing import Any

from irflow.cli.compare import add_compare_parser
from irflow.cli.options import experiment_option, json_option, no_track_option

TASK_RUNNER_HELP = (
    "default: one process; dask: a Dask LocalCluster on 127.0.0.1 (or --scheduler ADDRESS) "
    "runs embedding shards and per-system retrieval"
)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Tracking and scale-out options of ``irflow run``."""
    experiment_option(parser)
    no_track_option(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the significance tests and latency sampling")
    _runner_options(parser)


def _runner_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task-runner", choices=["default", "dask"], default="default", help=TASK_RUNNER_HELP)
    parser.add_argument("--scheduler", metavar="ADDRESS", help="an existing Dask scheduler, e.g. tcp://10.0.0.5:8786")


def configure_run(args: argparse.Namespace, preload: list[str], flow: Any = None) -> tuple[Any, dict[str, Any]]:
    """The evaluate flow (or ``flow``) with the chosen task runner, and its extra keyword arguments.

    The tracking store is checked first: an unreachable one fails before any stage. Then the command's
    Prefect API must be up (``preload`` is imported while it starts) before the task runner is made:
    a local Dask cluster hands its address to its workers, and asking for it any earlier would start
    a second, Prefect-owned server on the same database.
    """
    from irflow.flows import prefect_api
    from irflow.flows.evaluate import evaluate_flow
    from irflow.flows.stages import make_task_runner
    from irflow.tasks.tracking.log import TrackingOptions, check_tracking

    track = not getattr(args, "no_track", False)
    if track:
        check_tracking(experiment=getattr(args, "experiment", "irflow"))  # a write, within seconds
    prefect_api.ready(*preload)
    runner = make_task_runner(getattr(args, "task_runner", "default"), getattr(args, "scheduler", None))
    flow = flow or evaluate_flow
    flow = flow.with_options(task_runner=runner) if runner is not None else flow
    return flow, {
        "seed": getattr(args, "seed", 0),
        "tracking": TrackingOptions(
            enabled=track, experiment=getattr(args, "experiment", "irflow"), labels=getattr(args, "labels", None) or {}
        ),
    }


def run_summary(document: dict[str, Any]) -> str:
    """The last lines of ``irflow run``, one link each: the run's name, its MLflow run (its UI URL, else its
    id), the run list with the headline columns shown, and its Prefect flow run."""
    run, mlflow = document.get("run") or {}, document.get("mlflow") or {}
    lines = [f"run:     {run.get('name', '?')}"]
    if mlflow.get("run_id"):
        lines.append(f"MLflow:  {mlflow.get('url') or 'run ' + mlflow['run_id']}")
        if mlflow.get("runs_url"):
            lines.append(f"runs:    {mlflow['runs_url']}")
    else:
        lines.append("MLflow:  not tracked")
    if run.get("prefect_flow_run_id"):
        lines.append(f"Prefect: {run.get('prefect_flow_run_url') or 'flow run ' + run['prefect_flow_run_id']}")
    return "\n".join(lines)


def stage_libraries(specs: list[str]) -> list[str]:
    """Heavy libraries the stages of these systems import: loaded while a temporary Prefect server starts."""
    from irflow.tasks.experiment import models_of

    return ["sentence_transformers"] if any(models_of(spec) for spec in specs) else []


# ---------------------------------------------------------------------------------------------
# suite / nightly


DEFAULT_SUITE_FILE = "deployments/nightly.yaml"  # flows.suite.DEFAULT_NIGHTLY_CONFIG, without importing Prefect


def check_suite(args: argparse.Namespace) -> None:
    """The suite file read and every dataset, system, model and metric in it checked, before Prefect."""
    from pathlib import Path

    from irflow.cli.checks import check_dataset, check_file
    from irflow.tasks.core.config import package_data
    from irflow.tasks.experiment import load_experiment, validate_experiment

    path = Path(args.config).expanduser()
    if not path.is_file() and args.config == DEFAULT_SUITE_FILE:
        path = package_data("deployments", "nightly.yaml")
    experiment = load_experiment(check_file(path, "SUITE_FILE", "a suite YAML (datasets × systems)"))
    for dataset in experiment.datasets:
        check_dataset(dataset, f"{args.config}: datasets")
    validate_experiment(experiment)


def cmd_suite(args: argparse.Namespace) -> int:
    import json

    from irflow.flows import prefect_api
    from irflow.flows.suite import nightly_flow, resolve_experiment, suite_flow, suite_output
    from irflow.tasks.experiment import validate_experiment
    from irflow.tasks.tracking.log import check_tracking

    experiment = validate_experiment(resolve_experiment(None, args.config))  # bad names fail before any stage
    suite_output(experiment, args.command, args.output)
    track = not args.no_track
    if track:
        check_tracking(experiment=experiment.mlflow_experiment)  # a write, within seconds
    prefect_api.ready(*stage_libraries(experiment.specs()))
    flow = nightly_flow if args.command == "nightly" else suite_flow
    result: Any = flow(
        config=args.config, output=args.output, task_runner=args.task_runner, scheduler=args.scheduler, track=track
    )
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, default=str))
        return 0
    tracked = f"MLflow run {result['mlflow_run_id']}" if result.get("mlflow_run_id") else "MLflow: not tracked"
    print(f"results: {result['output']}/ (suite.md, suite.json); {tracked}")
    if result.get("verdict"):
        print(result["verdict"])
    return 0


def add_orchestration_parsers(subparsers: Any) -> None:
    """Register ``compare``, ``suite`` and ``nightly`` on the ``irflow`` sub-command parsers."""
    add_compare_parser(subparsers)
    for name, text in (
        ("suite", "evaluate a suite (a YAML of datasets × systems) with the mean over datasets"),
        ("nightly", "run a suite and compare with the last successful nightly run"),
    ):
        p = subparsers.add_parser(name, help=text)
        p.add_argument(
            "config", metavar="SUITE_FILE", help="suite YAML: datasets × systems (see deployments/nightly.yaml)"
        )
        p.add_argument("--output", metavar="DIR", help=f"result folder (default: results/{name}/<name>)")
        _runner_options(p)
        no_track_option(
            p,
            "do not log to MLflow"
            + (" (the last tracked nightly run is still read, to compare with)" if name == "nightly" else ""),
        )
        json_option(p, "print the suite's result as one JSON object")
        p.set_defaults(func=cmd_suite, check=check_suite, runs_flow=True)


__all__ = [
    "add_orchestration_parsers",
    "add_run_options",
    "cmd_suite",
    "configure_run",
    "run_summary",
    "stage_libraries",
]
