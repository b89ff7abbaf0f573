"""``irflow pool``: what to judge next: the top ``--depth`` of several systems, as a zbench file and a
sheet to fill in (``irflow agreement SHEET SHEET...`` says how far judges' filled sheets agree).

Wired into the CLI by :func:`irflow.cli.main.build_parser`; the work is in ``tasks.evalsets.pool``.
Filled sheets come back with ``irflow datasets import SHEET --format sheet --dataset D``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from irflow.cli.options import dataset_option, depth_option, json_option


def check_pool(args: argparse.Namespace) -> None:
    """The dataset, the systems, the depth and the output folder, before any retrieval."""
    from irflow.cli.checks import check_depth, check_systems
    from irflow.tasks.core.output_folder import check_output

    check_depth(args.depth)
    check_systems(args.dataset, args.system, split=args.split, depth=args.depth)
    check_output(args.output, marker=None)  # an unwritable folder fails at once


def cmd_pool(args: argparse.Namespace) -> int:
    from irflow.tasks.evalsets.pool import pool, write_pool
    from irflow.tasks.ingest import load_dataset
    from irflow.tasks.retrieve.searchers import retrieve
    from irflow.tasks.systems.specs import parse_system

    specs = [parse_system(s) for s in args.system]
    dataset = load_dataset(args.dataset, args.split)
    runs = {str(spec): retrieve(dataset, spec, depth=args.depth).run for spec in specs}
    pooled = pool(dataset, runs, args.depth, include_judged=args.include_judged)
    info = {"systems": list(runs), "k": args.depth, "include_judged": args.include_judged}
    summary = write_pool(dataset, pooled, args.output, info)
    folder = Path(args.output)
    if args.json:  # pool.json's content, and where the files are
        files = {
            "sheet": str(folder / "sheet.tsv"),
            "pool": str(folder / "pool.jsonl"),
            "summary": str(folder / "pool.json"),
        }
        print(json.dumps({**summary, "files": files}, indent=2, default=str))
        return 0  # "pool/" prints pool/sheet.tsv, not pool//sheet.tsv
    print(
        f"pooled {summary['documents']:,} documents over {summary['queries']:,} queries "
        f"({summary['per_query']:.1f} per query) from {len(runs)} systems' top {args.depth}:\n"
        f"  {folder / 'sheet.tsv'} (fill in the grade column)\n  {folder / 'pool.jsonl'} (irflow annotate --input)"
    )
    return 0


def add_pool_parser(subparsers: Any) -> None:
    """Register ``pool`` on the ``irflow`` sub-command parsers."""
    p = subparsers.add_parser("pool", help="pool the top k of several systems into a judging sheet and zbench file")
    dataset_option(p, "dataset whose queries and corpus are pooled", required=True)
    p.add_argument("--split", help="split (default: test; dev for MS MARCO)")
    p.add_argument("--system", action="append", required=True, metavar="SPEC", help="a system to pool (repeatable)")
    depth_option(p, "pool depth: the top N of each system (default 10)", default=10)
    p.add_argument("--output", required=True, metavar="DIR", help="folder for pool.jsonl, sheet.tsv and pool.json")
    p.add_argument("--include-judged", action="store_true", help="also pool documents the dataset already judges")
    json_option(p, "print pool.json's content (and where the files are) as one JSON object")
    p.set_defaults(func=cmd_pool, check=check_pool)


__all__ = ["add_pool_parser", "check_pool", "cmd_pool"]
