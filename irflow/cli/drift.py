"""``irflow drift --dataset D --current LOG``: has the query traffic moved away from evaluation set D?

Wired into the CLI by ``flows.cli.build_parser`` with ``add_drift_parser(sub)``; the statistics are
in ``tasks.evalsets.drift``. Exit code 0 either way, or 3 with ``--fail-on-drift`` when drift is found (for a
nightly job's alert).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from irflow.cli.options import dataset_option, embedder_option, json_option

DRIFT_EXIT = 3


def check_drift(args: argparse.Namespace) -> None:
    """The evaluation set, the current log's query column, the embedder and the numbers, before any encode."""
    from irflow.cli.checks import check_dataset, check_embedder, log_columns
    from irflow.tasks.core.output_folder import check_output
    from irflow.tasks.core.schema import InputError

    if args.output:
        check_output(args.output, marker=None)  # an unwritable folder fails at once
    check_dataset(args.dataset)
    columns = log_columns(args.current, "--current", "a query log (CSV, TSV, JSONL or Parquet) with a query column")
    if "query" not in columns and "text" not in columns:
        found = ", ".join(columns[:12]) or "none"
        raise InputError(f"--current {args.current}: no query or text column; columns found: {found}")
    if not 0 < args.alpha < 1:
        raise InputError(f"--alpha expects a number between 0 and 1, got {args.alpha}")
    if args.permutations < 1:
        raise InputError(f"--permutations expects an integer >= 1, got {args.permutations}")
    check_embedder(args.embedder)


def cmd_drift(args: argparse.Namespace) -> int:
    from irflow.tasks.core.atomic import write_json
    from irflow.tasks.evalsets.drift import DriftCheck, nearest_similarities

    check = DriftCheck.of(
        reference=args.dataset,
        current=str(args.current),
        split=args.split,
        model=args.embedder,
        alpha=args.alpha,
        permutations=args.permutations,
        seed=args.seed,
    )
    report, *vectors = check.run()
    if args.json:
        print(
            json.dumps(
                {"reference": args.dataset, "current": str(args.current), "model": args.embedder, **report.as_dict()},
                indent=2,
                default=str,
            )
        )
    else:
        print(report.text())
    if args.output:
        from irflow.tasks.report.plots import drift_similarity

        folder = Path(args.output)
        folder.mkdir(parents=True, exist_ok=True)
        record = {"reference": args.dataset, "current": str(args.current), "model": args.embedder}
        write_json(folder / "drift.json", {**record, **report.as_dict()})
        drift_similarity(*nearest_similarities(*vectors), report.unseen_threshold, folder / "nearest.png")
        if not args.json:
            print(f"figures: {folder / 'drift.json'}, plot: {folder / 'nearest.png'}")
    return DRIFT_EXIT if report.drift and args.fail_on_drift else 0


def add_drift_parser(subparsers: Any) -> None:
    """Register ``drift`` on the ``irflow`` sub-command parsers."""
    p = subparsers.add_parser("drift", help="test whether current queries drifted away from an evaluation set")
    dataset_option(
        p, "the evaluation set (its queries) the current queries are compared with", old=("--reference",), required=True
    )
    p.add_argument("--split", help="split of the reference (default: test)")
    p.add_argument(
        "--current", required=True, metavar="LOG", help="current queries: CSV/TSV/JSONL/Parquet, query column"
    )
    embedder_option(p, "embedding model for the meaning test (default minilm)", old=("--model",), default="minilm")
    p.add_argument(
        "--alpha",
        type=float,
        default=0.01,
        help="drift when either p-value (meaning, unseen topics) is below alpha/2, Bonferroni (0.01)",
    )
    p.add_argument("--permutations", type=int, default=1000, help="label permutations of the MMD test (1000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the permutations and samples (0)")
    p.add_argument("--output", metavar="DIR", help="also write drift.json and the plot nearest.png into DIR")
    p.add_argument("--fail-on-drift", action="store_true", help=f"exit {DRIFT_EXIT} when drift is found")
    json_option(p, "print the figures as one JSON object")
    p.set_defaults(func=cmd_drift, check=check_drift)


__all__ = ["add_drift_parser", "cmd_drift"]
