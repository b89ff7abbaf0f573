"""``irflow compare``: paired changes between two runs (result folders, run names or MLflow run ids), the last
N runs of an experiment, or the systems of one result folder against its baseline. Systems are named by their
labels, as everywhere else; ``--json`` gives each row's spec beside its label.

Imports stay lazy so ``irflow --help`` answers at once."""

from __future__ import annotations

import argparse
from typing import Any

from irflow.cli.options import json_option, result_argument

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
    specs, was = _specs(after), _specs(before)
    if len(before.keys) == 1 and len(after.keys) == 1 and before.keys != after.keys:  # two systems head to head
        (dataset, old), (_, new) = before.keys[0], after.keys[0]
        name = f"{old} -> {new}"
        specs[(dataset, name)] = f"{was.get((dataset, old), old)} -> {specs.get((dataset, new), new)}"
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
    if len(changes):  # the label is the table's name for a system; its spec stands beside it in --json
        keys = list(zip(changes["dataset"], changes["system"]))
        changes.insert(2, "spec", [specs.get(k, was.get(k, k[1])) for k in keys])
        if any(k in was and k in specs and was[k] != specs[k] for k in keys):  # a label whose definition changed
            changes.insert(3, "spec_before", [was.get(k, specs.get(k, k[1])) for k in keys])
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

    from irflow.tasks.report.results import labelled_per_query
    from irflow.tasks.tracking.log import snapshot
    from irflow.tasks.tracking.read import Snapshot, resolve_run

    folder = Path(ref)
    if folder.is_dir() and not _tracked(folder):  # named by label, as MLflow's runs are
        return Snapshot(*labelled_per_query(folder))
    return snapshot(tracker, resolve_run(tracker, ref))


def _specs(found: Any) -> dict[tuple[str, str], str]:
    """(dataset, label) -> the system's spec, where the snapshot knows it."""
    return {key: str(params["system.spec"]) for key, params in found.params.items() if params.get("system.spec")}


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


def add_compare_parser(subparsers: Any) -> None:
    """Register ``irflow compare``."""
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


__all__ = ["MAX_LAST", "add_compare_parser", "check_compare", "cmd_compare", "family_text", "format_changes"]
