"""``irflow datasets``: list, download, inspect and import datasets (synthesis: ``cli.synthesize``;
the query-log sampling options: ``cli.querylog``)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from irflow.cli.options import dataset_option, json_option
from irflow.cli.querylog import add_querylog_options
from irflow.cli.synthesize import add_synthesize_parser
from irflow.cli.terminal import print_dataset_info

_MAP_FIELDS = (
    *("corpus.doc_id", "corpus.title", "corpus.text"),
    *("queries.query_id", "queries.text"),
    *("qrels.query_id", "qrels.doc_id", "qrels.relevance"),
)


def _parse_mapping(items: list[str]) -> dict[str, str]:
    """``--map TABLE.FIELD=COLUMN`` options as a dict; a malformed one is an InputError (exit 2)."""
    from irflow.tasks.core.schema import InputError

    mapping = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in _MAP_FIELDS or not value:
            raise InputError(
                f"--map expects TABLE.FIELD=COLUMN with TABLE.FIELD one of {', '.join(_MAP_FIELDS)} "
                f"(e.g. corpus.text=body), got {item!r}"
            )
        mapping[key] = value
    return mapping


def _parse_thresholds(text: str | None) -> tuple[float, ...] | None:
    """``--grade-thresholds 0.5,0.25,0.1``: numbers in (0, 1]; a malformed list is an InputError (exit 2)."""
    from irflow.tasks.core.schema import InputError

    if not text:
        return None
    try:
        values = tuple(float(t) for t in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(0 < v <= 1 for v in values):
        raise InputError(
            f"--grade-thresholds expects comma-separated numbers in (0, 1], e.g. 0.5,0.25,0.1; got {text!r}"
        )
    return values


def cmd_datasets_list(args: argparse.Namespace) -> int:
    from irflow.tasks.ingest import list_datasets

    rows = list_datasets()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        stored = ", ".join(r["stored"]) if r["stored"] else "-"
        print(f"{r['name']:<{width}}  {r['kind']:<8}  stored splits: {stored}")
    return 0


def check_dataset_argument(args: argparse.Namespace) -> None:
    """``NAME`` or ``--dataset NAME`` (one of them), a dataset irflow knows: did-you-mean otherwise."""
    from irflow.cli.checks import check_dataset
    from irflow.tasks.core.schema import InputError

    if args.name and args.dataset and args.name != args.dataset:
        raise InputError(f"two datasets given: NAME {args.name!r} and --dataset {args.dataset!r}; give one")
    args.name = args.name or args.dataset
    if not args.name:
        raise InputError("which dataset? give NAME or --dataset NAME (`irflow datasets list` shows the names)")
    check_dataset(args.name, "NAME")


def cmd_datasets_info(args: argparse.Namespace) -> int:
    from irflow.tasks.ingest import dataset_info

    manifest = dataset_info(args.name, args.split)
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        print_dataset_info(manifest)
    return 0


def cmd_datasets_download(args: argparse.Namespace) -> int:
    from irflow.tasks.ingest import dataset_info

    manifest = dataset_info(args.name, args.split)
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        print_dataset_info(manifest)
    return 0


def check_import(args: argparse.Namespace) -> None:
    """The source path, the new name, the base dataset, the mapping, thresholds and sampling options."""

    from irflow.cli.checks import check_dataset
    from irflow.cli.querylog import query_sampling
    from irflow.tasks.core.schema import InputError
    from irflow.tasks.ingest import FORMATS, check_source
    from irflow.tasks.ingest.store import check_import_name

    if args.format in FORMATS:  # an unknown format is argparse's to name
        try:
            check_source(args.path, args.format)
        except InputError as exc:
            raise InputError(f"PATH {exc}") from None
    check_import_name(args.name)
    check_dataset(args.dataset, "--dataset")
    _parse_mapping(args.map)
    _parse_thresholds(args.grade_thresholds)
    query_sampling(args)


def cmd_datasets_import(args: argparse.Namespace) -> int:
    from irflow.cli.querylog import print_query_set, query_sampling
    from irflow.tasks.ingest import import_dataset

    sampling = query_sampling(args)
    manifest = import_dataset(
        args.path,
        args.format,
        args.name,
        split=args.split,
        mapping=_parse_mapping(args.map),
        base=args.dataset,
        grade_thresholds=_parse_thresholds(args.grade_thresholds),
        drop_missing_documents=args.drop_missing_documents,
        min_impressions=args.min_impressions,
        sampling=sampling,
        logged_by=args.logged_by,
    )
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        return 0
    print_dataset_info(manifest)
    if sampling is not None:
        print_query_set(manifest, args.name)
    return 0


def add_datasets_parser(sub: Any) -> None:
    """Register ``irflow datasets`` and its subcommands."""
    ds = sub.add_parser("datasets", help="list, download, inspect and import datasets")
    ds_sub = ds.add_subparsers(dest="datasets_command", required=True)
    p = ds_sub.add_parser("list", help="known datasets and their stored splits")
    json_option(p, "print the datasets as a JSON list")
    p.set_defaults(func=cmd_datasets_list)
    p = ds_sub.add_parser("download", help="download and ingest a dataset (BEIR names: beir/scifact, ...)")
    p.add_argument("name", nargs="?", metavar="NAME", help="dataset name (or --dataset NAME)")
    dataset_option(p, "dataset name (the same as NAME)")
    p.add_argument("--split", help="split to ingest (default: test; dev for MS MARCO)")
    json_option(p, "print the dataset's info as one JSON object")
    p.set_defaults(func=cmd_datasets_download, check=check_dataset_argument)
    p = ds_sub.add_parser("info", help="counts, grade histogram and fingerprint of a dataset split")
    p.add_argument("name", nargs="?", metavar="NAME", help="dataset name (or --dataset NAME)")
    dataset_option(p, "dataset name (the same as NAME)")
    p.add_argument("--split", help="split (default: test; dev for MS MARCO)")
    json_option(p)
    p.set_defaults(func=cmd_datasets_info, check=check_dataset_argument)
    p = ds_sub.add_parser("import", help="ingest a local source under a new name")
    p.add_argument("path", metavar="PATH", help="the source: a file (or a folder for beir and msmarco)")
    p.add_argument(
        "--format",
        required=True,
        choices=["beir", "msmarco", "jsonl", "csv", "parquet", "zbench", "trec-qrels", "clicks", "sheet", "querylog"],
    )
    p.add_argument("--name", required=True)
    p.add_argument("--split", help="split name (default: test; dev for msmarco)")
    p.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="TABLE.FIELD=COLUMN",
        help="source column for a canonical field, e.g. corpus.text=body (repeatable)",
    )
    dataset_option(
        p,
        "trec-qrels, clicks, sheet, querylog: the stored dataset whose corpus (and queries) the import refers to",
        old=("--base",),
    )
    p.add_argument(
        "--grade-thresholds",
        help="zbench zELO scores / clicks attractiveness: thresholds for grades 3,2,1 (default 0.5,0.25,0.1)",
    )
    p.add_argument(
        "--min-impressions",
        type=int,
        default=10,
        help="clicks: a (query, document) pair shown fewer times stays unjudged (default 10)",
    )
    p.add_argument(
        "--logged-by",
        metavar="SYSTEM",
        help="clicks: the system whose rankings the log records (the report names it as the judgements' source)",
    )
    p.add_argument(
        "--drop-missing-documents",
        action="store_true",
        help="drop judgements of documents absent from the corpus (default: keep them, as trec_eval and BEIR do: "
        "relevant and unretrievable)",
    )
    add_querylog_options(p)
    json_option(p, "print the new dataset's info as one JSON object")
    p.set_defaults(func=cmd_datasets_import, check=check_import)
    add_synthesize_parser(ds_sub)
