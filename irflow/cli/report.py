"""``irflow report RESULT``: rebuild report.md, significance.csv and plots of a result folder from its
stored files (metrics.json, per_query.parquet, runs/*.trec), without re-running retrieval.

Wired into the CLI by ``flows.cli.build_parser`` with ``add_report_parser(sub)``.
"""

from __future__ import annotations

import argparse
from typing import Any

from irflow.cli.options import json_option, result_argument


def check_report(args: argparse.Namespace) -> None:
    from irflow.cli.checks import check_result

    check_result(args.result)


def cmd_report(args: argparse.Namespace) -> int:
    from irflow.tasks.report.write import rebuild_report

    overrides = {k: v for k in ("permutations", "bootstrap", "seed", "ci") if (v := getattr(args, k)) is not None}
    path = rebuild_report(args.result, load=not args.no_dataset, **overrides)
    if args.json:
        import json

        print(
            json.dumps(
                {
                    "report": str(path),
                    "plots": str(path.parent / "plots"),
                    "significance": str(path.parent / "significance.csv"),
                }
            )
        )
        return 0
    print(f"report: {path} (plots in {path.parent / 'plots'}/, tests in {path.parent / 'significance.csv'})")
    return 0


def add_report_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``report RESULT`` on the ``irflow`` sub-command parsers."""
    p = subparsers.add_parser("report", help="rebuild report.md and plots of a result folder (no retrieval)")
    result_argument(p, "a result folder of `irflow run` (metrics.json, per_query.parquet)")
    p.add_argument(
        "--no-dataset",
        action="store_true",
        help="do not re-load the dataset (no segments, document types, lengths or snippets)",
    )
    p.add_argument("--permutations", type=int, help="randomization test sign flips (default: as stored, 10000)")
    p.add_argument("--bootstrap", type=int, help="bootstrap resamples for the CIs (default: as stored, 10000)")
    p.add_argument("--seed", type=int, help="seed of the randomization test and bootstrap (default: as stored, 0)")
    p.add_argument(
        "--ci", choices=["bca", "percentile"], help="bootstrap confidence interval method (default: as stored, bca)"
    )
    json_option(p, "print where the report went as one JSON object")
    p.set_defaults(func=cmd_report, check=check_report)
    return p


__all__ = ["add_report_parser", "cmd_report"]
