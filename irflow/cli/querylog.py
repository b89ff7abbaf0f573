"""``irflow datasets import LOG --format querylog --base D``: the options that sample a query set from a log.

Wired into ``datasets import`` by ``flows.cli`` with :func:`add_querylog_options`; the reading,
normalising and sampling are in ``tasks.ingest.querylog``. Imports stay lazy (``--help`` loads no
pandas).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from irflow.tasks.core.schema import Manifest

OPTIONS = ("sample", "strategy", "stratify", "seed", "min_count", "source", "since", "until")


def add_querylog_options(parser: argparse.ArgumentParser) -> None:
    """The querylog options of ``datasets import``, in their own help group (all default to None: unset)."""
    q = parser.add_argument_group("--format querylog (a log with query or text, count, timestamp and labels)")
    q.add_argument("--sample", type=int, metavar="N", help="queries to draw (default: every distinct query)")
    q.add_argument("--strategy", choices=["frequency", "uniform"], help="draw by searches (default) or uniformly")
    q.add_argument(
        "--stratify",
        metavar="KEYS",
        help="draw per stratum, in proportion to its share: comma-separated category,segment,length,difficulty,source",
    )
    q.add_argument(
        "--seed", type=int, metavar="N", help="sampling seed (default 0): the same log and seed draw the same queries"
    )
    q.add_argument("--min-count", type=int, metavar="N", help="leave out queries searched fewer times (default 1)")
    q.add_argument(
        "--source",
        choices=["production", "synthetic", "expert", "click"],
        help="source of the rows without a source column value (default production)",
    )
    q.add_argument("--since", metavar="TIME", help="keep searches at or after this ISO 8601 time")
    q.add_argument("--until", metavar="TIME", help="keep searches before this ISO 8601 time")


def query_sampling(args: argparse.Namespace) -> Any:
    """The options as a ``Sampling`` for ``--format querylog``; None for other formats, which must not use them."""
    from irflow.tasks.core.schema import InputError

    given = {k: getattr(args, k) for k in OPTIONS if getattr(args, k) is not None}
    if args.format != "querylog":
        if given:
            names = ", ".join(f"--{k.replace('_', '-')}" for k in given)
            raise InputError(f"{names}: only for --format querylog")
        return None
    from irflow.tasks.ingest.querylog import Sampling

    given["size"] = given.pop("sample", None)
    if "stratify" in given:
        given["stratify"] = tuple(k.strip() for k in given["stratify"].split(",") if k.strip())
    return Sampling(**given)


def print_query_set(manifest: Manifest, name: str) -> None:
    """What the import drew and what is judged (after the dataset's info)."""
    from irflow.tasks.ingest.querylog import describe

    print(describe(manifest["source"]["querylog"], name))
