"""``irflow abtest LOG --unit user_id``: an online A/B test analysed at its randomisation unit.

The flow is ``irflow.flows.abtest``, the statistics ``irflow.tasks.online.abtest``; Prefect and MLflow
are imported only when the command runs, so registering it keeps ``irflow --help`` fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from irflow.cli.options import experiment_option, json_option, no_track_option

NEEDED = ("arm", "query", "clicked")  # beside the unit column (tasks.online.abtest_log)
EXPERIMENT = "irflow-abtest"  # api.abtest.ABTEST_EXPERIMENT, not imported: `irflow --help` loads no pandas


def check_abtest(args: argparse.Namespace) -> None:
    """The log's header (the unit, arm, query and clicked columns), the control arm and the numbers, before
    Prefect: only the header, and the arm column when ``--control`` names an arm, are read."""
    from irflow.cli.checks import column_values, log_columns, require_columns
    from irflow.tasks.core.names import suggestion
    from irflow.tasks.core.output_folder import check_output
    from irflow.tasks.core.schema import InputError

    if not 0 < args.treatment_share < 1:
        raise InputError(f"--treatment-share {args.treatment_share}: expected a share between 0 and 1 (0.5: even)")
    if args.tau is not None and not args.tau > 0:
        raise InputError(f"--tau {args.tau}: expected a positive number (the spread of the effects expected)")
    columns = log_columns(args.log, "LOG", "an A/B test log (CSV, TSV, JSONL or Parquet)")
    if args.unit not in columns:
        raise InputError(
            f"--unit {args.unit!r}: the log {args.log} has no such column{suggestion(args.unit, columns)}; "
            f"columns found: {', '.join(columns[:12]) or 'none'}"
        )
    require_columns(columns, NEEDED, "LOG", args.log, "one row per query shown: unit, arm, query, clicked")
    if args.sequential and not {"day", "timestamp"} & set(columns):
        raise InputError(f"--sequential reads the log day by day: {args.log} has no day or timestamp column")
    if args.control is not None:
        arms = column_values(args.log, "arm")
        if args.control not in arms:
            shown = ", ".join(arms[:6]) + (", ..." if len(arms) > 6 else "")
            raise InputError(
                f"--control {args.control!r} is not an arm of the log{suggestion(args.control, arms)}; "
                f"its arms: {shown}"
            )
    from irflow.tasks.core.run_identity import default_root

    check_output(args.output or str(default_root(None, "abtest") / Path(args.log).stem))  # unwritable: now


def cmd_abtest(args: argparse.Namespace) -> int:
    from irflow.tasks.core.run_identity import default_root

    output = args.output or str(default_root(None, "abtest") / Path(args.log).stem)  # and results/abtest/latest
    from irflow.flows import prefect_api

    prefect_api.ready()
    from irflow.flows.abtest import AbTestConfig, abtest_flow

    config = AbTestConfig(
        log=str(args.log),
        output=output,
        unit=args.unit,
        control=args.control,
        treatment_share=args.treatment_share,
        sequential=args.sequential,
        **({"tau": args.tau} if args.tau is not None else {}),
    )
    document = abtest_flow(config, track=not args.no_track, experiment=args.experiment)
    if args.json:
        import json

        print(json.dumps({**document, "output": output}, indent=2, default=str))
        return 0
    print(summary(document))
    from irflow.cli.terminal import print_verdict
    from irflow.tasks.online.abtest_report import abtest_verdict

    print_verdict(abtest_verdict(document))  # the sentence ABTest.verdict and report.md say
    print(f"\nresults: {output}/ (metrics.json, report.md, report.html)")
    return 0


def summary(document: dict[str, Any]) -> str:
    """The terminal's lines: the sample-ratio verdict first, then one line per metric."""
    from irflow.tasks.report.format import num, signed  # no negative zero: the reports' helpers

    ab = document["abtest"]
    srm = ab["srm"]
    lines = []
    if srm["mismatch"]:
        lines.append(
            f"SAMPLE-RATIO MISMATCH (p = {srm['p_value']:.2g}): {srm['control_units']:,} vs "
            f"{srm['treatment_units']:,} {ab['unit']}s; the comparison is untrustworthy"
        )
    else:
        lines.append(
            f"sample ratio ok (p = {srm['p_value']:.3f}): {srm['control_units']:,} vs {srm['treatment_units']:,}"
        )
    lines.append(f"{ab['treatment']} - {ab['control']}, 95% intervals by {ab['unit']}:")
    sequential = (document.get("sequential") or {}).get("metrics", {})
    for name, m in ab["metrics"].items():
        line = (
            f"  {name:<16} {num(m['control'])} -> {num(m['treatment'])}  diff {signed(m['difference'])} "
            f"[{signed(m['ci'][0])}, {signed(m['ci'][1])}]  p {m['p_value']:.4f}"
        )
        if name in sequential:
            line += f"  always-valid p {sequential[name]['final_always_valid_p_value']:.4f}"
        lines.append(line)
    return "\n".join(lines)


def add_abtest_parser(subparsers: Any) -> None:
    """Register ``abtest`` on the ``irflow`` sub-command parsers."""
    p = subparsers.add_parser(
        "abtest",
        help="analyse an online A/B test log at its randomisation unit (delta method, SRM, mSPRT)",
        description="Per-arm click-through rate, success rate, abandonment and MRR of clicks from a log with one "
        "row per query shown (unit, arm, query, clicked; optional position, dwell, converted, day/timestamp); "
        "each difference with a 95%% interval and p-value at the randomisation unit, a sample-ratio-mismatch "
        "test, and optionally always-valid sequential p-values over the log read day by day.",
    )
    p.add_argument("log", metavar="LOG", help="the log: CSV, TSV, JSONL or Parquet, one row per query shown")
    p.add_argument("--unit", default="user_id", help="column of the randomisation unit (default user_id)")
    p.add_argument(
        "--control", metavar="NAME", help="the control arm (default: an arm named control, else the log's first arm)"
    )
    p.add_argument(
        "--treatment-share",
        type=float,
        default=0.5,
        metavar="SHARE",
        help="planned share of units in the treatment, for the sample-ratio test (default 0.5)",
    )
    p.add_argument(
        "--sequential",
        action="store_true",
        help="also always-valid p-values (mSPRT) over the log read day by day; needs a day or timestamp column",
    )
    p.add_argument(
        "--tau",
        type=float,
        help="mSPRT: spread of the effects expected, in metric units (default 0.01)",
    )
    p.add_argument("--output", metavar="DIR", help="result folder (default results/abtest/<log name>)")
    no_track_option(p)
    experiment_option(p, EXPERIMENT)
    json_option(p, "print the result as one JSON object (metrics.json's content)")
    p.set_defaults(func=cmd_abtest, check=check_abtest, runs_flow=True)


__all__ = ["add_abtest_parser", "check_abtest", "cmd_abtest", "summary"]
