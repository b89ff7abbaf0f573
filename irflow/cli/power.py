"""``irflow power RESULT``: how many queries a result's paired comparisons need, and the smallest difference
they detect (``tasks.compare.power``). Imports stay lazy so ``irflow --help`` answers at once."""

from __future__ import annotations

import argparse
from typing import Any

from irflow.cli.options import baseline_option, json_option, result_argument


def check_power(args: argparse.Namespace) -> None:
    """The result folder holds per-query values; the numbers are in range."""
    from irflow.cli.checks import check_result
    from irflow.tasks.core.schema import InputError

    check_result(args.result, ("metrics.json", "per_query.parquet"))
    for name, value in (("--alpha", args.alpha), ("--power", args.power)):
        if not 0 < value < 1:
            raise InputError(f"{name} expects a number between 0 and 1, got {value}")
    if args.resamples < 0:
        raise InputError(f"--resamples expects an integer >= 0 (0: skip), got {args.resamples}")


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
    from irflow.tasks.report.format import num, signed
    from irflow.tasks.report.power import nothing_to_compare, only_system

    if not found:
        print(only_system(named, args.metric))  # as Power.verdict says it
        return 0
    print(f"{args.metric}, paired against {named}; {args.power:.0%} power at α = {args.alpha} (two-sided paired t)")
    for spec, p in found.items():
        system = labels.get(spec, spec)
        said = nothing_to_compare(system, named, args.metric, p.mean_difference, p.sd_difference)
        if said is not None:  # σ_Δ = 0: no effect size or power to print beside it
            print(f"{said}.")
            continue
        checked = f" (resampling: {p.queries_needed_resampled:,})" if p.queries_needed_resampled else ""
        if args.resamples and p.queries_needed and p.queries_needed > RESAMPLE_LIMIT:
            checked = f" (not resampled above {RESAMPLE_LIMIT:,})"
        needed = f"{p.queries_needed:,}{checked}" if p.queries_needed else "none would (Δ = 0)"
        print(
            f"{system}: {p.queries} queries, Δ {signed(p.mean_difference)} (sd {num(p.sd_difference)}); "
            f"detects ±{num(p.minimum_detectable_difference)} now; to detect {signed(p.delta)}: {needed} queries "
            f"(power now {p.power_now:.0%})"
        )
    return 0


def add_power_parser(sub: Any) -> None:
    """Register ``irflow power``."""
    q = sub.add_parser("power", help="queries needed for 80%% power, and the smallest difference a result detects")
    result_argument(q, "a result folder of `irflow run` (with per_query.parquet)")
    q.add_argument("--metric", default="nDCG@10", metavar="NAME", help="metric (default nDCG@10)")
    q.add_argument("--delta", type=float, help="the difference to detect (default: the observed one)")
    baseline_option(q, "the system the others are compared with (a spec or a label; default: the result's baseline)")
    q.add_argument("--alpha", type=float, default=0.05, help="significance level (0.05)")
    q.add_argument("--power", type=float, default=0.8, help="power (0.8)")
    q.add_argument("--resamples", type=int, default=2000, help="resamples of the check by simulation (0: skip)")
    q.add_argument("--seed", type=int, default=0, help="seed of the resampling (0)")
    json_option(q)
    q.set_defaults(func=cmd_power, check=check_power)


__all__ = ["add_power_parser", "check_power", "cmd_power"]
