"""``irflow datasets synthesize``: synthetic queries for a dataset's documents (``tasks.evalsets.synthesize``).

Wired into ``irflow datasets`` by ``flows.cli`` with :func:`add_synthesize_parser`. Imports stay lazy
(``--help`` loads no pandas).
"""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING, cast

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
            "Sample documents of --base (seeded, stratified by a document metadata column), ask an LLM for queries "
            'in several styles (JSON {"queries": [...]}), keep a query only when --filter-system ranks its source '
            "document in the top --k (round trip), de-duplicate, and store dataset --name whose judgements mark "
            "each query's source document (query metadata source=synthetic, style).",
            100,
        ),
        epilog="--llm takes the LLM judge specs of irflow annotate: openai:MODEL[@BASE_URL], anthropic:MODEL,\n"
        "gemini:MODEL, with their options (key_env, concurrency, rpm, tpm, price, max_tokens, reasoning,\n"
        "thinking, ...; see irflow annotate --help). The key is read from the environment, never stored.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base", required=True, help="dataset whose documents the queries are written for")
    p.add_argument("--name", required=True, help="name of the new dataset")
    p.add_argument("--llm", required=True, metavar="SPEC", help="LLM spec, e.g. openai:gpt-4o-mini")
    p.add_argument("--queries", type=int, default=200, help="synthetic queries to keep (default 200)")
    p.add_argument("--split", help="split of --base and of the new dataset (default: the base's)")
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
    p.add_argument("--k", type=int, default=10, help="the source document must be in this top k (default 10)")
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
        help="store the base's judged queries beside the synthetic ones (source: their own, else expert), "
        "so one irflow run compares both, segmented by source",
    )
    p.add_argument("--dry-run", action="store_true", help="print calls, tokens and cost; send and write nothing")
    p.set_defaults(func=cmd_synthesize)


def cmd_synthesize(args: argparse.Namespace) -> int:
    from irflow.tasks.evalsets.synthesize import SynthesisConfig, describe, dry_run_text, synthesize

    config = SynthesisConfig(
        base=args.base,
        name=args.name,
        llm=args.llm,
        queries=args.queries,
        split=args.split,
        styles=tuple(s.strip() for s in args.styles.split(",") if s.strip()),
        per_call=args.per_call,
        overgenerate=args.overgenerate,
        filter_system=args.filter_system,
        k=args.k,
        stratify=args.stratify,
        seed=args.seed,
        with_base_queries=args.with_base_queries,
    )
    result = synthesize(config, dry_run=args.dry_run)
    if args.dry_run:
        print(dry_run_text(result))
        return 0
    print_dataset_info(cast("Manifest", result))
    print(describe(result["source"]["synthesis"]))
    print(f"evaluate: irflow run --dataset {args.name} --system ... (the report segments by source and style)")
    return 0
