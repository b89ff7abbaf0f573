"""``irflow datasets synthesize``: synthetic queries for a dataset's documents (``tasks.evalsets.synthesize``).

Wired into ``irflow datasets`` by ``flows.cli`` with :func:`add_synthesize_parser`. Imports stay lazy
(``--help`` loads no pandas).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING, cast

from irflow.cli.options import dataset_option, depth_option, json_option, option
from irflow.cli.terminal import print_dataset_info

if TYPE_CHECKING:
    from irflow.tasks.core.schema import Manifest

STYLES = ("keyword", "question", "paraphrase")  # tasks.evalsets.synthesize.STYLES, without importing it


def add_synthesize_parser(datasets: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``irflow datasets synthesize``, under ``irflow datasets``."""
    p = datasets.add_parser(
        "synthesize",
        help="queries written by an LLM for sampled documents, kept when a retriever finds their document again",
        description=textwrap.fill(
            "Sample documents of --dataset (seeded, stratified by a document metadata column), ask an LLM for queries "
            'in several styles (JSON {"queries": [...]}), keep a query only when --filter-system ranks its source '
            "document in the top --depth (round trip), de-duplicate, and store dataset --name whose judgements mark "
            "each query's source document (query metadata source=synthetic, style).",
            100,
        ),
        epilog="--llm (the LLM that writes the queries) takes the judge specs of irflow annotate:\n"
        "openai:MODEL[@BASE_URL], anthropic:MODEL, gemini:MODEL, with their options\n"
        "(key_env, concurrency, rpm, tpm, price, max_tokens, reasoning,\n"
        "thinking, ...; see irflow annotate --help). The key is read from the environment, never stored.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    dataset_option(p, "the stored dataset whose documents the queries are written for", old=("--base",), required=True)
    p.add_argument("--name", required=True, help="name of the new dataset")
    option(p, "--llm", required=True, metavar="SPEC", help="the LLM that writes the queries, e.g. openai:gpt-4o-mini")
    p.add_argument("--queries", type=int, default=200, help="synthetic queries to keep (default 200)")
    p.add_argument("--split", help="split of --dataset and of the new dataset (default: the dataset's)")
    p.add_argument(
        "--styles",
        default=",".join(STYLES),
        help=f"comma-separated styles, rotated over the calls (default {','.join(STYLES)})",
    )
    p.add_argument("--per-call", type=int, default=2, help="queries asked for in one call (default 2)")
    p.add_argument(
        "--overgenerate",
        type=float,
        default=2.0,
        help="ask for this many times --queries, since the filter drops some (default 2)",
    )
    p.add_argument(
        "--filter-system", default="bm25", metavar="SPEC", help="any irflow system spec for the round trip (bm25)"
    )
    depth_option(p, "the source document must be in this top N (default 10)", default=10)
    p.add_argument(
        "--stratify",
        default="auto",
        metavar="COLUMN",
        help="document metadata column to stratify by; auto (default: the first with 2-30 values) or none",
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument(
        "--with-base-queries",
        action="store_true",
        help="store --dataset's judged queries beside the synthetic ones (source: their own, else expert), "
        "so one irflow run compares both, segmented by source",
    )
    p.add_argument("--dry-run", action="store_true", help="print calls, tokens and cost; send and write nothing")
    json_option(p, "print the new dataset's info (or the dry run's plan) as one JSON object")
    p.set_defaults(func=cmd_synthesize, check=check_synthesize)


def check_synthesize(args: argparse.Namespace) -> None:
    """The dataset, the new name, the LLM spec, the filter system, the styles and the numbers, before any call."""
    from irflow.cli.checks import check_depth, check_llm, check_systems
    from irflow.tasks.core.schema import InputError
    from irflow.tasks.ingest.store import check_import_name

    check_import_name(args.name)
    check_depth(args.depth)
    check_llm(args.llm, "--llm")
    check_systems(args.dataset, [args.filter_system], option="--filter-system", split=args.split)
    styles = [s.strip() for s in args.styles.split(",") if s.strip()]
    unknown = [s for s in styles if s not in STYLES]
    if not styles or unknown:
        raise InputError(f"--styles {args.styles!r}: expected a comma-separated choice of {', '.join(STYLES)}")
    for name, value in (("--queries", args.queries), ("--per-call", args.per_call)):
        if value < 1:
            raise InputError(f"{name} expects an integer >= 1, got {value}")


def cmd_synthesize(args: argparse.Namespace) -> int:
    from irflow.tasks.evalsets.synthesize import SynthesisConfig, describe, dry_run_text, synthesize

    config = SynthesisConfig(
        base=args.dataset,
        name=args.name,
        llm=args.llm,
        queries=args.queries,
        split=args.split,
        styles=tuple(s.strip() for s in args.styles.split(",") if s.strip()),
        per_call=args.per_call,
        overgenerate=args.overgenerate,
        filter_system=args.filter_system,
        k=args.depth,
        stratify=args.stratify,
        seed=args.seed,
        with_base_queries=args.with_base_queries,
    )
    result = synthesize(config, dry_run=args.dry_run)
    if args.json:
        import json

        print(json.dumps(result, indent=2, default=str))
        return 0
    if args.dry_run:
        print(dry_run_text(result))
        return 0
    print_dataset_info(cast("Manifest", result))
    print(describe(result["source"]["synthesis"]))
    print(f"evaluate: irflow run --dataset {args.name} --system ... (the report segments by source and style)")
    return 0
