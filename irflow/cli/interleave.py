"""``irflow interleave`` (team-draft interleaving of two systems with simulated users, or a real
interleaving log: the ``interleave`` flow) and ``irflow power RESULT`` (how many queries a result's paired
comparisons need, and the smallest difference they detect: ``tasks.compare.power``).

Imports stay lazy so ``irflow --help`` answers at once.
"""

from __future__ import annotations

import argparse
from typing import Any


def cmd_interleave(args: argparse.Namespace) -> int:
    from irflow.flows import prefect_api
    from irflow.flows.interleave import interleave_flow
    from irflow.tasks.core import run_identity
    from irflow.tasks.core.schema import InputError
    from irflow.tasks.tracking import TrackingOptions

    systems = list(args.system or [])
    if args.log is None and (args.dataset is None or len(systems) != 2):
        raise InputError("irflow interleave needs --dataset D and two --system SPEC (A, then B), or --log FILE")
    for name, value, low in (("--users", args.users, 1), ("--replicates", args.replicates, 10)):
        if value is not None and value < low:
            raise InputError(f"{name} expects an integer >= {low}, got {value}")
    for name, value in (("--alpha", args.alpha), ("--power", args.power)):
        if not 0 < value < 1:
            raise InputError(f"{name} expects a number between 0 and 1, got {value}")
    if args.log is not None:  # a bad log, spec or click model fails here, before any flow starts
        from irflow.tasks.online.interleave_log import read_interleaving_log

        read_interleaving_log(args.log, systems)
    else:
        from irflow.flows.evaluate import validate
        from irflow.tasks.online.clickmodels import parse_click_model

        validate(args.dataset, systems, [])
        parse_click_model(args.clicks)
    name = run_identity.run_name(args.dataset or "interleave-logs", ["interleave", *systems])
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
    o = block["outcome"]
    labels, prefers = side_labels(block), label_of(block, block["prefers"])
    print(
        f"A = {labels['A']}, B = {labels['B']}: {o['wins']:,} A wins, {o['ties']:,} ties, "
        f"{o['losses']:,} B wins over {o['impressions']:,} impressions; Δ_AB {o['delta_ab']:+.4f}, p {o['p_value']:.3g}"
        f" -> {'prefers ' + prefers if prefers else 'no preference'}"
    )
    sizes = block.get("queries_to_detect")
    if sizes:
        il, ab = (sizes[t]["queries"] or "more than searched" for t in ("interleaving", "ab_ctr"))
        print(f"queries needed at {sizes['power']:.0%} power: interleaving {il}, A/B test of CTR {ab}")
    print(f"results: {output}/ (metrics.json, report.md, per_query.parquet)")
    return 0


def cmd_power(args: argparse.Namespace) -> int:
    import json

    from irflow.tasks.compare.power import RESAMPLE_LIMIT, power_table
    from irflow.tasks.report.plots import short_labels
    from irflow.tasks.report.results import load_results

    stored = load_results(args.result)
    labels = short_labels(list(dict.fromkeys(stored.per_query["system"])), stored.document.get("labels"))
    specs = {label: spec for spec, label in labels.items()}
    baseline = args.baseline or stored.document.get("baseline") or next(iter(stored.document["systems"]))
    baseline = specs.get(baseline, baseline)  # --baseline names a system by its label or its spec
    found = power_table(
        stored.per_query,
        args.metric,
        baseline,
        args.delta,
        alpha=args.alpha,
        power=args.power,
        resamples=args.resamples,
        seed=args.seed,
    )
    named = labels.get(baseline, baseline)
    if args.json:  # systems by label, each with its spec
        systems = {labels.get(s, s): {"spec": s, **p.as_dict()} for s, p in found.items()}
        document = {"metric": args.metric, "baseline": named, "baseline_spec": baseline, "systems": systems}
        print(json.dumps(document, indent=2))
        return 0
    print(f"{args.metric}, paired against {named}; {args.power:.0%} power at α = {args.alpha} (two-sided paired t)")
    for spec, p in found.items():
        system = labels.get(spec, spec)
        checked = f" (resampling: {p.queries_needed_resampled:,})" if p.queries_needed_resampled else ""
        if args.resamples and p.queries_needed and p.queries_needed > RESAMPLE_LIMIT:
            checked = f" (not resampled above {RESAMPLE_LIMIT:,})"
        needed = f"{p.queries_needed:,}{checked}" if p.queries_needed else "none would (Δ = 0)"
        print(
            f"{system}: {p.queries} queries, Δ {p.mean_difference:+.4f} (sd {p.sd_difference:.4f}); "
            f"detects ±{p.minimum_detectable_difference:.4f} now; to detect {p.delta:+.4f}: {needed} queries "
            f"(power now {p.power_now:.0%})"
        )
    return 0


def add_interleave_parsers(sub: Any) -> None:
    """Register ``irflow interleave`` and ``irflow power``."""
    p = sub.add_parser("interleave", help="team-draft interleaving of two systems: simulated users or a real log")
    p.add_argument("--dataset", help="dataset whose queries and judgements drive the simulated users")
    p.add_argument("--split", help="split (default: test)")
    p.add_argument("--system", action="append", metavar="SPEC", help="system A, then system B (twice)")
    p.add_argument(
        "--clicks",
        default="pbm",
        metavar="MODEL",
        help="click model: pbm or cascade, with options, e.g. pbm:eta=0.8, cascade:stop=0.5, pbm:log=clicks.csv",
    )
    p.add_argument("--users", type=int, help="simulated users, one query each (default: 20 per query)")
    p.add_argument("--depth", type=int, default=10, help="results shown per list (default 10)")
    p.add_argument("--log", metavar="FILE", help="analyse a real interleaving log instead (CSV/TSV/JSONL/Parquet)")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    p.add_argument("--power", type=float, default=0.8, help="power for the queries needed (0.8)")
    p.add_argument("--replicates", type=int, default=500, help="simulated experiments per sample size (500)")
    p.add_argument("--seed", type=int, default=0, help="seed of the users, the coin flips and the clicks (0)")
    p.add_argument("--output", metavar="DIR", help="result folder (default: results/<dataset>/interleave/<name>/)")
    p.add_argument("--overwrite", action="store_true", help="replace another run's results in --output")
    p.add_argument("--experiment", default="irflow", help="MLflow experiment (default: irflow)")
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    p.set_defaults(func=cmd_interleave, runs_flow=True)

    q = sub.add_parser("power", help="queries needed for 80%% power, and the smallest difference a result detects")
    q.add_argument("result", metavar="RESULT", help="a result folder of `irflow run` (with per_query.parquet)")
    q.add_argument("--metric", default="nDCG@10", help="metric (default nDCG@10)")
    q.add_argument("--delta", type=float, help="the difference to detect (default: the observed one)")
    q.add_argument("--baseline", metavar="SPEC", help="the system compared with (default: the run's baseline)")
    q.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    q.add_argument("--power", type=float, default=0.8, help="power (0.8)")
    q.add_argument("--resamples", type=int, default=2000, help="resamples of the check by simulation (0: skip)")
    q.add_argument("--seed", type=int, default=0, help="seed of the resampling (0)")
    q.add_argument("--json", action="store_true", help="print one JSON object")
    q.set_defaults(func=cmd_power)


__all__ = ["add_interleave_parsers", "cmd_interleave", "cmd_power"]
