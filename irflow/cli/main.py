"""The ``irflow`` command line. Imports stay lazy so ``irflow --help`` answers at once."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from irflow.cli.terminal import configure_logging as _configure_logging
from irflow.cli.terminal import metrics_table as _metrics_table

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


def _print_info(manifest: dict[str, Any]) -> None:
    from irflow.tasks.ingest.qrels import describe_missing_documents

    grades = ", ".join(f"{g}: {n:,}" for g, n in manifest["grades"].items())
    dropped = manifest.get("dropped_qrels", {})
    lines = [
        ("dataset", f"{manifest['name']} (split {manifest['split']})"),
        ("documents", f"{manifest['documents']:,}"),
        ("queries", f"{manifest['queries']:,} judged"),
        ("judgements", f"{manifest['judgements']:,}"),
        ("grades", grades or "-"),
        ("fingerprint", manifest["fingerprint"]),
        ("source", f"{manifest['source'].get('kind')}: {manifest['source'].get('location')}"),
        ("document metadata", ", ".join(manifest.get("document_metadata", [])) or "-"),
        ("query metadata", ", ".join(manifest.get("query_metadata", [])) or "-"),
        ("ignore identical ids", str(manifest.get("ignore_identical_ids", False)).lower()),
    ]
    if dropped and any(dropped.get(k) for k in ("unknown_query", "unknown_doc", "duplicate")):
        lines.append(
            (
                "dropped judgements",
                f"{dropped['unknown_query']} unknown queries, {dropped['unknown_doc']} "
                f"unknown documents, {dropped['duplicate']} duplicates",
            )
        )
    missing = manifest.get("missing_documents") or {}
    if missing.get("judgements"):
        lines.append(("not in the corpus", describe_missing_documents(missing)))
    for key, value in lines:
        print(f"{key + ':':<22}{value}")


def cmd_datasets_info(args: argparse.Namespace) -> int:
    from irflow.tasks.ingest import dataset_info

    manifest = dataset_info(args.name, args.split)
    if args.json:
        print(json.dumps(manifest, indent=2, sort_keys=True))
    else:
        _print_info(manifest)
    return 0


def cmd_datasets_download(args: argparse.Namespace) -> int:
    from irflow.tasks.ingest import dataset_info

    _print_info(dataset_info(args.name, args.split))
    return 0


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
        base=args.base,
        grade_thresholds=_parse_thresholds(args.grade_thresholds),
        drop_missing_documents=args.drop_missing_documents,
        min_impressions=args.min_impressions,
        sampling=sampling,
    )
    _print_info(manifest)
    if sampling is not None:
        print_query_set(manifest, args.name)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from irflow.cli.orchestration import configure_run, run_summary, stage_libraries
    from irflow.flows.evaluate import (
        DEFAULT_METRICS,
        DEFAULT_SYSTEMS,
        check_arguments,
        claim_output,
        release_output,
        validate,
    )
    from irflow.tasks.core.run_identity import run_name

    systems = list(args.system or DEFAULT_SYSTEMS)
    metrics = list(args.metric or DEFAULT_METRICS)
    if args.dry_run:
        return _print_api_plan(args, systems)
    specs, _ = validate(args.dataset, [args.baseline, *systems] if args.baseline else systems, metrics)  # in a second
    check_arguments(args.dataset, args.split, args.depth, args.latency_runs)
    output = claim_output(args.dataset, args.output, args.overwrite, run_name(args.dataset, specs))
    try:
        flow, extra = configure_run(args, stage_libraries(specs))  # the tracking store is checked before any stage
        document = flow(
            dataset=args.dataset,
            systems=systems,
            metrics=metrics,
            split=args.split,
            depth=args.depth,
            output=str(output),
            latency_runs=args.latency_runs,
            baseline=args.baseline,
            overwrite=args.overwrite,
            run_name=output.name if args.output is None else None,
            **extra,
        )
    finally:
        if args.output is None:
            release_output(output)  # only when the run left it empty
    print()
    print(_metrics_table(document))
    print(f"\nresults: {output}/ (metrics.json, per_query.parquet, runs/, report.md, plots/)")
    print(run_summary(document))
    return 0


def _print_api_plan(args: argparse.Namespace, systems: list[str]) -> int:
    """``irflow run --dry-run``: what the API embedding models would be asked, and cost; nothing is sent."""
    from irflow.tasks.embed.encode import api_plan
    from irflow.tasks.ingest import load_dataset
    from irflow.tasks.systems.specs import as_spec

    specs = [str(as_spec(s)) for s in ([args.baseline, *systems] if args.baseline else systems)]
    dataset = load_dataset(args.dataset, args.split)
    timed = 10 + min(100, len(dataset.queries)) * args.latency_runs if args.latency_runs > 0 else 0
    plan = api_plan(dataset, list(dict.fromkeys(specs)), latency_queries=timed)
    print(f"{dataset.name} ({dataset.split}): {len(dataset.corpus):,} documents, {len(dataset.queries):,} queries")
    if not plan:
        print("no system calls an API: nothing to pay (dry run, nothing was run)")
        return 0

    def usd(value: float | None) -> str:
        return "price unknown (option price=USD per 1M tokens)" if value is None else f"${value:,.4f}"

    total: float | None = 0.0
    for row in plan:
        print(
            f"{row['system']}\n  {row['model']}: {row['calls']:,} calls, {row['tokens']:,} tokens "
            f"({row['tokens_counted_by']}), {usd(row['usd'])} to embed {row['texts']:,} texts "
            f"({row['cached_texts']:,} cached)\n  latency stage: {row['latency_calls']:,} calls, "
            f"~{row['latency_tokens']:,} tokens, {usd(row['latency_usd'])}"
        )
        parts = (row["usd"], row["latency_usd"])
        total = None if total is None or None in parts else total + sum(p for p in parts if p is not None)
    print(f"total: {usd(total)} (dry run: nothing was sent)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="irflow",
        description="Evaluate retrieval systems: ingest, embed, index, retrieve, measure, compare, report.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    ds = sub.add_parser("datasets", help="list, download, inspect and import datasets")
    ds_sub = ds.add_subparsers(dest="datasets_command", required=True)
    p = ds_sub.add_parser("list", help="known datasets and their stored splits")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_datasets_list)
    p = ds_sub.add_parser("download", help="download and ingest a dataset (BEIR names: beir/scifact, ...)")
    p.add_argument("name")
    p.add_argument("--split", help="split to ingest (default: test; dev for MS MARCO)")
    p.set_defaults(func=cmd_datasets_download)
    p = ds_sub.add_parser("info", help="counts, grade histogram and fingerprint of a dataset split")
    p.add_argument("name")
    p.add_argument("--split")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_datasets_info)
    p = ds_sub.add_parser("import", help="ingest a local source under a new name")
    p.add_argument("path")
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
    p.add_argument(
        "--base", help="trec-qrels, clicks, sheet, querylog: dataset whose corpus (and queries) the import refers to"
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
        "--drop-missing-documents",
        action="store_true",
        help="drop judgements of documents absent from the corpus (default: keep them, as trec_eval and BEIR do: "
        "relevant and unretrievable)",
    )
    from irflow.cli.querylog import add_querylog_options

    add_querylog_options(p)
    p.set_defaults(func=cmd_datasets_import)
    from irflow.cli.synthesize import add_synthesize_parser

    add_synthesize_parser(ds_sub)
    p = sub.add_parser("run", help="evaluate systems on a dataset (default: the demo dataset techdocs)")
    p.add_argument("--dataset", default="techdocs", help="dataset name (default: techdocs)")
    p.add_argument("--split", help="split (default: test; dev for MS MARCO)")
    p.add_argument(
        "--system",
        action="append",
        metavar="SPEC",
        help="system spec, repeatable (default: bm25, dense:minilm, hybrid:bm25+dense:minilm)",
    )
    p.add_argument("--metric", action="append", metavar="NAME", help="metric, repeatable (e.g. nDCG@10, R@100)")
    p.add_argument("--baseline", metavar="SPEC", help="the system the others are compared with (default: the first)")
    p.add_argument("--depth", type=int, default=100, help="hits per query (default 100, at most 1000)")
    p.add_argument(
        "--output", metavar="DIR", help="result folder (default: a new results/<dataset>/<run name>/ and a latest link)"
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the results of another run in --output (refused otherwise)"
    )
    p.add_argument("--latency-runs", type=int, default=3, help="timed repetitions per query (0: skip latency)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the calls, tokens and USD of API embedding models, run nothing"
    )
    p.set_defaults(func=cmd_run, runs_flow=True)

    from irflow.cli.drift import add_drift_parser
    from irflow.cli.orchestration import add_orchestration_parsers, add_run_options
    from irflow.cli.pool import add_pool_parsers
    from irflow.cli.report import add_report_parser
    from irflow.flows.annotate import add_annotate_parser

    add_run_options(p)
    add_report_parser(sub)
    add_orchestration_parsers(sub)
    add_annotate_parser(sub)
    add_pool_parsers(sub)
    add_drift_parser(sub)
    return parser


QUIET_SERVICES = {  # no network here and no telemetry anywhere; a loaded machine needs a longer start-up
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
}


def _prefect_api() -> Any:
    """Start a temporary Prefect server now, so it is up by the time the flow starts (see flows.prefect_api)."""
    from irflow.flows.prefect_api import prefect_api

    return prefect_api()


def main(argv: list[str] | None = None) -> int:
    import contextlib
    import os

    for key, value in QUIET_SERVICES.items():
        os.environ.setdefault(key, value)
    args = build_parser().parse_args(argv)
    _configure_logging(args.verbose)
    from irflow.tasks.core.schema import IrflowError

    try:
        with (
            _prefect_api()
            if getattr(args, "runs_flow", False) and not getattr(args, "dry_run", False)
            else contextlib.nullcontext()
        ):
            return int(args.func(args) or 0)
    except IrflowError as err:
        print(f"irflow: error: {err}", file=sys.stderr)
        return 2
    except Terminated:
        print("irflow: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("irflow: interrupted", file=sys.stderr)
        return 130
    except Exception:
        if Terminated.received:  # a library wrapped the signal's exception (pydantic-core does): still SIGTERM
            print("irflow: terminated", file=sys.stderr)
            return 128 + signal.SIGTERM
        raise


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: unwind like Ctrl-C (clean-up runs), exit 143. ``received`` stays set, because
    code the exception passes through may wrap it in another exception type."""

    received = False


def _terminated(signum: int, frame: object) -> None:
    Terminated.received = True
    raise Terminated()


def entry_point() -> None:
    """The ``irflow`` console command: :func:`main`, then a quick exit.

    ``gc.freeze()`` moves every object alive at the end into the permanent generation, so the
    interpreter's final garbage collections skip them: with torch, pandas, MLflow and Prefect loaded,
    that cuts ~1.5 s of tear-down to ~0.2 s. atexit handlers (Prefect's log and event workers,
    MLflow, logging) still run, and results are already written and closed by then.
    """
    import gc

    # SIGTERM (a scheduler stopping the job, `kill PID`) unwinds like Ctrl-C, so the temporary Prefect
    # server and the Dask cluster are stopped and no half-written result is left behind.
    signal.signal(signal.SIGTERM, _terminated)
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry_point()
