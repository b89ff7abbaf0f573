"""``irflow pool`` (what to judge next: the top k of several systems, as a zbench file and a sheet to
fill in) and ``irflow agreement`` (how far judges' filled sheets agree).

Wired into the CLI by ``flows.cli.build_parser`` with ``add_pool_parsers(sub)``; the work is in
``tasks.evalsets.pool``. Filled sheets come back with ``irflow datasets import SHEET --format sheet --base D``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_pool(args: argparse.Namespace) -> int:
    from irflow.tasks.core.output_folder import check_output
    from irflow.tasks.evalsets.pool import pool, write_pool
    from irflow.tasks.ingest import load_dataset
    from irflow.tasks.retrieve.searchers import retrieve
    from irflow.tasks.systems.specs import parse_system

    check_output(args.output, marker=None)  # before the retrievals: an unwritable folder fails at once
    specs = [parse_system(s) for s in args.system]
    dataset = load_dataset(args.dataset, args.split)
    runs = {str(spec): retrieve(dataset, spec, depth=args.k).run for spec in specs}
    pooled = pool(dataset, runs, args.k, include_judged=args.include_judged)
    info = {"systems": list(runs), "k": args.k, "include_judged": args.include_judged}
    summary = write_pool(dataset, pooled, args.output, info)
    folder = Path(args.output)  # "pool/" prints pool/sheet.tsv, not pool//sheet.tsv
    print(
        f"pooled {summary['documents']:,} documents over {summary['queries']:,} queries "
        f"({summary['per_query']:.1f} per query) from {len(runs)} systems' top {args.k}:\n"
        f"  {folder / 'sheet.tsv'} (fill in the grade column)\n  {folder / 'pool.jsonl'} (irflow annotate --input)"
    )
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    from irflow.tasks.evalsets.pool import (
        agreement_table,
        agreement_text,
        cohen_kappa,
        krippendorff_alpha,
        single_grade_reason,
    )

    table = agreement_table(args.sheets)
    both = table.dropna()
    print(f"{len(table):,} units judged, {len(both):,} by every judge")
    if table.shape[1] == 2:
        a, b = table.iloc[:, 0], table.iloc[:, 1]
        print(f"Cohen's kappa:            {agreement_text(cohen_kappa(a, b))}")
        print(f"Cohen's kappa, quadratic: {agreement_text(cohen_kappa(a, b, weights='quadratic'))}")
    for level in ("nominal", "ordinal", "interval"):
        print(f"Krippendorff's alpha, {level + ':':<9} {agreement_text(krippendorff_alpha(table, level))}")
    reason = single_grade_reason(table)
    if reason:
        print(reason)
    return 0


def add_pool_parsers(subparsers: Any) -> None:
    """Register ``pool`` and ``agreement`` on the ``irflow`` sub-command parsers."""
    p = subparsers.add_parser("pool", help="pool the top k of several systems into a judging sheet and zbench file")
    p.add_argument("--dataset", required=True, help="dataset whose queries and corpus are pooled")
    p.add_argument("--split", help="split (default: test; dev for MS MARCO)")
    p.add_argument("--system", action="append", required=True, metavar="SPEC", help="a system to pool (repeatable)")
    p.add_argument("--k", type=int, default=10, help="pool depth: the top k of each system (default 10)")
    p.add_argument("--output", required=True, metavar="DIR", help="folder for pool.jsonl, sheet.tsv and pool.json")
    p.add_argument("--include-judged", action="store_true", help="also pool documents the dataset already judges")
    p.set_defaults(func=cmd_pool)
    p = subparsers.add_parser("agreement", help="agreement of two or more judges' filled sheets (kappa, alpha)")
    p.add_argument("sheets", nargs="+", metavar="SHEET", help="filled sheets (TSV or CSV: query_id, doc_id, grade)")
    p.set_defaults(func=cmd_agreement)


__all__ = ["add_pool_parsers", "cmd_agreement", "cmd_pool"]
