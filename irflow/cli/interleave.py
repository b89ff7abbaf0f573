"""``irflow interleave``: team-draft interleaving of two systems with simulated users, or a real
interleaving log (the ``interleave`` flow).

Imports stay lazy so ``irflow --help`` answers at once.
"""

from __future__ import annotations

import argparse
from typing import Any

from irflow.cli.options import dataset_option, depth_option, experiment_option, json_option, no_track_option


def check_interleave(args: argparse.Namespace) -> None:
    """Two systems on a dataset (or a real log), the click model and the numbers, before Prefect."""
    from irflow.cli.checks import check_depth, check_file, check_systems
    from irflow.tasks.core.schema import InputError

    systems = list(args.system or [])
    if args.log is None and (args.dataset is None or len(systems) != 2):
        raise InputError("irflow interleave needs --dataset D and two --system SPEC (A, then B), or --log FILE")
    for name, value, low in (("--users", args.users, 1), ("--replicates", args.replicates, 10)):
        if value is not None and value < low:
            raise InputError(f"{name} expects an integer >= {low}, got {value}")
    for name, number in (("--alpha", args.alpha), ("--power", args.power)):
        if not 0 < number < 1:
            raise InputError(f"{name} expects a number between 0 and 1, got {number}")
    check_depth(args.depth)
    if args.log is not None:  # a bad log, spec or click model fails here, before any flow starts
        from irflow.tasks.online.interleave_log import read_interleaving_log

        check_file(args.log, "--log", "an interleaving log (CSV, TSV, JSONL or Parquet)")
        read_interleaving_log(args.log, systems)
    else:
        from irflow.tasks.online.clickmodels import parse_click_model

        check_systems(args.dataset, systems, split=args.split, depth=args.depth)
        parse_click_model(args.clicks)


def cmd_interleave(args: argparse.Namespace) -> int:
    from irflow.flows import prefect_api
    from irflow.flows.interleave import interleave_flow
    from irflow.tasks.core import run_identity
    from irflow.tasks.tracking import TrackingOptions

    systems = list(args.system or [])
    where = args.dataset or "interleave-logs"
    name = run_identity.run_name(where, ["interleave", *systems])
    if args.output:
        output = run_identity.check_explicit_output(args.output, args.overwrite)
    else:  # results/<dataset>/interleave/<name>/ (results/interleave/ for a log), beside its own latest
        output = run_identity.claim_default_output(args.dataset, name, "interleave")
    prefect_api.ready()
    try:
        document = interleave_flow(
            output=str(output),
            dataset=args.dataset,
            systems=systems,
            clicks=args.clicks,
            split=args.split,
            users=args.users,
            depth=args.depth,
            seed=args.seed,
            log=args.log,
            alpha=args.alpha,
            power=args.power,
            replicates=args.replicates,
            tracking=TrackingOptions(enabled=not args.no_track, experiment=args.experiment, run_name=None),
        )
    finally:
        if args.output is None:
            from irflow.flows.evaluate import release_output

            release_output(output)  # only when the run left it empty
    from irflow.tasks.online.interleave_report import label_of, side_labels

    block = document["interleave"]
    if args.json:
        import json

        print(json.dumps({**document, "output": str(output)}, indent=2, default=str))
        return 0
    from irflow.tasks.report.format import signed

    o = block["outcome"]
    labels, prefers = side_labels(block), label_of(block, block["prefers"])
    print(
        f"A = {labels['A']}, B = {labels['B']}: {o['wins']:,} A wins, {o['ties']:,} ties, "
        f"{o['losses']:,} B wins over {o['impressions']:,} impressions; Δ_AB {signed(o['delta_ab'])}, "
        f"p {o['p_value']:.3g}"
        f" -> {'prefers ' + prefers if prefers else 'no preference'}"
    )
    sizes = block.get("queries_to_detect")
    if sizes:
        il, ab = (sizes[t]["queries"] or "more than searched" for t in ("interleaving", "ab_ctr"))
        print(f"queries needed at {sizes['power']:.0%} power: interleaving {il}, A/B test of CTR {ab}")
    from irflow.cli.terminal import print_verdict
    from irflow.tasks.online.interleave_report import interleave_verdict

    print_verdict(interleave_verdict(document))  # the sentence Interleaving.verdict and report.md say
    print(f"\nresults: {output}/ (metrics.json, report.md, per_query.parquet)")
    return 0


def add_interleave_parser(sub: Any) -> None:
    """Register ``irflow interleave``."""
    p = sub.add_parser("interleave", help="team-draft interleaving of two systems: simulated users or a real log")
    dataset_option(p, "dataset whose queries and judgements drive the simulated users")
    p.add_argument("--split", help="split (default: test)")
    p.add_argument("--system", action="append", metavar="SPEC", help="system A, then system B (twice)")
    p.add_argument(
        "--clicks",
        default="pbm",
        metavar="MODEL",
        help="click model: pbm or cascade, with options, e.g. pbm:eta=0.8, cascade:stop=0.5, pbm:log=clicks.csv",
    )
    p.add_argument("--users", type=int, help="simulated users, one query each (default: 20 per query)")
    depth_option(p, "results shown per list (default 10)", default=10)
    p.add_argument("--log", metavar="FILE", help="analyse a real interleaving log instead (CSV/TSV/JSONL/Parquet)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    p.add_argument("--power", type=float, default=0.8, help="power for the queries needed (0.8)")
    p.add_argument("--replicates", type=int, default=500, help="simulated experiments per sample size (500)")
    p.add_argument("--seed", type=int, default=0, help="seed of the users, the coin flips and the clicks (0)")
    p.add_argument("--output", metavar="DIR", help="result folder (default: results/<dataset>/interleave/<name>/)")
    p.add_argument("--overwrite", action="store_true", help="replace another run's results in --output")
    experiment_option(p)
    no_track_option(p)
    json_option(p, "print the result as one JSON object (metrics.json's content)")
    p.set_defaults(func=cmd_interleave, check=check_interleave, runs_flow=True)


__all__ = ["add_interleave_parser", "check_interleave", "cmd_interleave"]
