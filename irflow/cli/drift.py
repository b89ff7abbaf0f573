"""``irflow drift --reference D --current LOG``: has the query traffic moved away from evaluation set D?

Wired into the CLI by ``flows.cli.build_parser`` with ``add_drift_parser(sub)``; the statistics are
in ``tasks.evalsets.drift``. Exit code 0 either way, or 3 with ``--fail-on-drift`` when drift is found (for a
nightly job's alert).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DRIFT_EXIT = 3


def cmd_drift(args: argparse.Namespace) -> int:
    from irflow.tasks.core.atomic import write_json
    from irflow.tasks.core.output_folder import check_output
    from irflow.tasks.evalsets.drift import DriftCheck, nearest_similarities

    if args.output:
        check_output(args.output, marker=None)  # before the encoding: an unwritable folder fails at once

    check = DriftCheck.of(
        reference=args.reference,
        current=str(args.current),
        split=args.split,
        model=args.model,
        alpha=args.alpha,
        permutations=args.permutations,
        seed=args.seed,
    )
    report, *vectors = check.run()
    print(report.text())
    if args.output:
        from irflow.tasks.report.plots import drift_similarity

        folder = Path(args.output)
        folder.mkdir(parents=True, exist_ok=True)
        record = {"reference": args.reference, "current": str(args.current), "model": args.model}
        write_json(folder / "drift.json", {**record, **report.as_dict()})
        drift_similarity(*nearest_similarities(*vectors), report.unseen_threshold, folder / "nearest.png")
        print(f"figures: {folder / 'drift.json'}, plot: {folder / 'nearest.png'}")
    return DRIFT_EXIT if report.drift and args.fail_on_drift else 0


def add_drift_parser(subparsers: Any) -> None:
    """Register ``drift`` on the ``irflow`` sub-command parsers."""
    p = subparsers.add_parser("drift", help="test whether current queries drifted away from an evaluation set")
    p.add_argument("--reference", required=True, metavar="DATASET", help="the evaluation set (its queries)")
    p.add_argument("--split", help="split of the reference (default: test)")
    p.add_argument(
        "--current", required=True, metavar="LOG", help="current queries: CSV/TSV/JSONL/Parquet, query column"
    )
    p.add_argument("--model", default="minilm", help="embedding model for the meaning test (default minilm)")
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
    p.set_defaults(func=cmd_drift)


__all__ = ["add_drift_parser", "cmd_drift"]
