"""CLI pieces for orchestration and tracking: ``irflow compare``, ``irflow suite``, ``irflow nightly``
and the ``irflow run`` options ``--experiment``, ``--no-track``, ``--seed``, ``--task-runner``,
``--scheduler``. Wired into ``flows.cli`` with::

    add_run_options(run_parser); add_orchestration_parsers(subparsers)
    flow, extra = configure_run(args, preload)   # in cmd_run, before the flow is called
    document = flow(..., **extra)

Imports stay lazy so ``irflow --help`` answers at once.
"""

from __future__ import annotations

import argparse
from typing import Any

from irflow.cli.options import experiment_option, json_option, no_track_option, result_argument

TASK_RUNNER_HELP = (
    "default: one process; dask: a Dask LocalCluster on 127.0.0.1 (or --scheduler ADDRESS) "
    "runs embedding shards and per-system retrieval"
)


MAX_LAST = 1000
"""The most runs ``irflow compare --last`` takes (an MLflow search page; 999 comparisons is already a lot)."""


def _last_count(text: str) -> int:
    """``--last N``: an integer from 2 (one pair) to :data:`MAX_LAST`, checked before MLflow is asked."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 2 <= value <= MAX_LAST:
        raise argparse.ArgumentTypeError(f"expected an integer from 2 to {MAX_LAST} (runs to compare), got {text!r}")
    return value


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
    check_tracking(experiment=experiment.mlflow_experiment)  # a write, within seconds
    prefect_api.ready(*stage_libraries(experiment.specs()))
    flow = nightly_flow if args.command == "nightly" else suite_flow
    result: Any = flow(config=args.config, output=args.output, task_runner=args.task_runner, scheduler=args.scheduler)
    if getattr(args, "json", False):
        print(json.dumps(result, indent=2, default=str))
        return 0
    print(f"results: {result['output']}/ (suite.md, suite.json); MLflow run {result['mlflow_run_id']}")
    if result.get("verdict"):
        print(result["verdict"])
    return 0


# ---------------------------------------------------------------------------------------------
# compare


def cmd_compare(args: argparse.Namespace) -> int:
    import json

    from irflow.tasks.core.schema import InputError
    from irflow.tasks.tracking.log import KIND, Tracker

    if len(args.runs) == 1:
        return _compare_within(args)
    tracker = Tracker(args.experiment)
    if args.runs:
        if len(args.runs) != 2:
            raise InputError(
                "irflow compare takes two runs (result folders, run names or MLflow run ids), or one folder"
            )
        pairs = [tuple(args.runs)]
    else:
        found = tracker.search(f"tags.`{KIND}` = '{args.kind}'", max_results=args.last)
        if len(found) < 2:
            raise InputError(f"experiment {args.experiment!r} has {len(found)} {args.kind} run(s); need 2 to compare")
        ids = [r.info.run_id for r in reversed(found)]  # oldest first
        pairs = list(zip(ids, ids[1:]))
    found_changes = [_compare_pair(args, tracker, before_ref, after_ref) for before_ref, after_ref in pairs]
    if getattr(args, "json", False):
        print(json.dumps({"comparisons": found_changes}, indent=2, default=str))
    return 0


def check_compare(args: argparse.Namespace) -> None:
    """One RESULT: a result folder with per-query values; two: each a folder, or a name MLflow resolves later."""
    from irflow.cli.checks import check_result

    if len(args.runs) == 1:
        check_result(args.runs[0], ("metrics.json", "per_query.parquet"))


def _compare_pair(args: argparse.Namespace, tracker: Any, before_ref: str, after_ref: str) -> dict[str, Any]:
    """Print the paired changes between two runs, with the family the correction ran over."""
    import pandas as pd

    from irflow.tasks.compare import regression
    from irflow.tasks.compare.significance import correct

    before, after = _snapshot(tracker, before_ref), _snapshot(tracker, after_ref)
    if len(before.keys) == 1 and len(after.keys) == 1 and before.keys != after.keys:  # two systems head to head
        name = f"{before.keys[0][1]} -> {after.keys[0][1]}"
        before = type(before)(before.per_query.assign(system=name), before.params)
        after = type(after)(after.per_query.assign(system=name), after.params)
    changes = regression.paired_changes(
        before.per_query,
        after.per_query,
        args.metric or None,
        correction=args.correction,
        permutations=args.permutations,
        seed=args.seed,
    )
    if args.family == "metric" and len(changes):  # one family per dataset and metric, as report.md
        groups = changes.groupby(["dataset", "metric"], sort=False)["p_randomization"]
        changes["p_adjusted"] = pd.concat([pd.Series(correct(g.tolist(), args.correction), g.index) for _, g in groups])
    if getattr(args, "json", False):
        return {"before": before_ref, "after": after_ref, "changes": changes.to_dict("records")}
    print(
        f"\n{before_ref} -> {after_ref}: after − before, paired by query; p = randomization test "
        f"({args.permutations:,} permutations, seed {args.seed}), {family_text(args.correction, args.family, changes)}"
    )
    print(format_changes(changes, args.alpha) if len(changes) else "  nothing in common to compare")
    return {"before": before_ref, "after": after_ref, "changes": changes.to_dict("records")}


def family_text(correction: str, family: str, table: Any) -> str:
    """What a correction ran over, said in the output: the whole table, or each metric's comparisons."""
    if family == "metric":
        sizes = table.groupby(["dataset", "metric"]).size() if len(table) else []
        counts = sorted(set(int(n) for n in sizes))
        each = "/".join(map(str, counts)) or "0"
        return f"{correction}-corrected per metric (family: the {each} comparison(s) of each metric)"
    return f"{correction}-corrected over all {len(table)} comparison(s) in this table (every system × metric)"


def _snapshot(tracker: Any, ref: str) -> Any:
    """A run's per-query values: from MLflow (a folder's own run when it was tracked), else from the folder's files."""
    from pathlib import Path

    from irflow.tasks.report.results import load_results
    from irflow.tasks.tracking.log import snapshot
    from irflow.tasks.tracking.read import Snapshot, resolve_run

    folder = Path(ref)
    if folder.is_dir() and not _tracked(folder):
        stored = load_results(folder)
        name = str(stored.document["dataset"]["name"])
        keys: dict[tuple[str, str], dict[str, str]] = {(name, s): {} for s in stored.systems}
        table = stored.per_query.assign(dataset=name)
        return Snapshot(table[["dataset", "system", "query_id", "metric", "value"]], keys)
    return snapshot(tracker, resolve_run(tracker, ref))


def _tracked(folder: Any) -> bool:
    import json

    try:
        document = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool((document.get("mlflow") or {}).get("run_id"))


def _compare_within(args: argparse.Namespace) -> int:
    """``irflow compare FOLDER``: every system of one evaluation against its baseline, one family per
    metric, exactly as report.md's significance table (same test, permutations and seed)."""
    import json

    from irflow.tasks.compare.significance import compare_all
    from irflow.tasks.report.plots import short_labels
    from irflow.tasks.report.results import load_results

    stored = load_results(args.runs[0])
    measures = args.metric or stored.document["measures"]
    table = compare_all(
        stored.per_query,
        measures,
        stored.baseline,
        correction=args.correction,
        permutations=args.permutations,
        bootstrap=1000,
        seed=args.seed,
        alpha=args.alpha,
    )
    labels = short_labels(list(dict.fromkeys(stored.per_query["system"])), stored.document.get("labels"))
    changes = table.assign(
        dataset=stored.document["dataset"]["name"],
        system=table["candidate"].map(lambda s: labels.get(s, s)),  # by label, as the report names them
        before=table["baseline_mean"],
        after=table["candidate_mean"],
    )
    if getattr(args, "json", False):
        print(
            json.dumps(
                {"result": args.runs[0], "baseline": stored.baseline, "changes": changes.to_dict("records")},
                indent=2,
                default=str,
            )
        )
        return 0
    baseline = labels.get(stored.baseline, stored.baseline)
    print(
        f"\n{args.runs[0]}: each system − baseline {baseline}, paired by query; p = randomization test "
        f"({args.permutations:,} permutations, seed {args.seed}), {family_text(args.correction, 'metric', changes)}"
        " — the family of report.md"
    )
    print(format_changes(changes, args.alpha) if len(changes) else "  only one system: nothing to compare")
    return 0


def format_changes(changes: Any, alpha: float = 0.05) -> str:
    """A fixed-width table of ``tasks.compare.regression.paired_changes``."""
    head = ("dataset", "system", "metric", "before", "after", "delta", "95% CI (BCa)", "p", "p adj", "W/T/L")
    rows = [
        (
            r["dataset"],
            r["system"],
            r["metric"],
            f"{r['before']:.4f}",
            f"{r['after']:.4f}",
            f"{r['delta']:+.4f}",
            f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]",
            f"{r['p_randomization']:.4f}",
            f"{r['p_adjusted']:.4f}{' *' if r['p_adjusted'] < alpha else ''}",
            f"{r['wins']}/{r['ties']}/{r['losses']}",
        )
        for r in changes.to_dict("records")
    ]
    widths = [max(len(str(x)) for x in column) for column in zip(head, *rows)]
    return (
        "\n".join("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip() for row in [head, *rows])
        + f"\n(* corrected p < {alpha})"
    )


def add_orchestration_parsers(subparsers: Any) -> None:
    """Register ``compare``, ``suite`` and ``nightly`` on the ``irflow`` sub-command parsers."""
    p = subparsers.add_parser(
        "compare", help="paired comparison of two runs (or the last N of an experiment, or the systems of one folder)"
    )
    result_argument(
        p,
        "two results, each a result folder, a run name or an MLflow run id (suite, evaluation or system runs; "
        "systems are matched by label; two system runs are compared head to head); or one result folder: its "
        "systems against its baseline, corrected per metric as report.md",
        nargs="*",
        dest="runs",
    )
    p.add_argument("--experiment", default="irflow", help="MLflow experiment for --last (default: irflow)")
    p.add_argument(
        "--last",
        type=_last_count,
        default=2,
        metavar="N",
        help=f"without run ids: compare each of the last N runs with the one before it (2 to {MAX_LAST}; default 2)",
    )
    p.add_argument(
        "--kind",
        default="evaluation",
        choices=["evaluation", "suite", "nightly", "system"],
        help="which runs --last takes (default: evaluation)",
    )
    p.add_argument("--metric", action="append", metavar="NAME", help="only this metric (repeatable)")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--correction", choices=["holm", "bonferroni"], default="holm")
    p.add_argument(
        "--family",
        choices=["all", "metric"],
        default="all",
        help="what the correction runs over: all = every row of the table (default); metric = each metric's "
        "comparisons (report.md's family)",
    )
    p.add_argument("--permutations", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    json_option(p, "print the comparisons as one JSON object instead of the table")
    p.set_defaults(func=cmd_compare, check=check_compare)
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
        json_option(p, "print the suite's result as one JSON object")
        p.set_defaults(func=cmd_suite, check=check_suite, runs_flow=True)


__all__ = [
    "add_orchestration_parsers",
    "add_run_options",
    "cmd_compare",
    "cmd_suite",
    "configure_run",
    "family_text",
    "format_changes",
    "run_summary",
    "stage_libraries",
]
