"""``irflow annotate``: zELO relevance annotation with a judge ensemble (the flow: ``irflow.flows.annotate``).

Prefect and MLflow are imported only when the command runs, so registering it keeps ``irflow --help`` fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from irflow.cli.options import (
    dataset_option,
    depth_option,
    experiment_option,
    json_option,
    judge_option,
    no_track_option,
)
from irflow.tasks.annotate.config import EXPERIMENT, JUDGE_HELP, AnnotateConfig


def add_annotate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``irflow annotate`` on the CLI's subparsers; defaults come from ``AnnotateConfig``."""
    default = AnnotateConfig(dataset="<dataset>")
    p = subparsers.add_parser(
        "annotate",
        help="zELO relevance annotation with a judge ensemble (resumable; --dry-run for the cost)",
        description="Annotate candidates with pairwise battles judged by an ensemble, turned into per-document "
        "zELO scores (Bradley-Terry), graded qrels and zbench AnnotatedQueryDocuments JSONL. "
        "Rerunning with the same --output resumes: only the missing votes are asked for.",
        epilog=JUDGE_HELP + "\nAPI keys come from the environment only.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group(required=True)
    dataset_option(source)
    source.add_argument("--input", metavar="JSONL", help="a zbench QueryDocuments file (imported as dataset --name)")
    p.add_argument("--name", help="dataset name for --input (default: zbench-<file stem>)")
    p.add_argument("--split", help="dataset split (default: test)")
    p.add_argument(
        "--system",
        metavar="SPEC",
        help="pick candidates as the top K of this system (default: the "
        "dataset's candidates table, as a zbench import has)",
    )
    depth_option(p, f"documents per query (default {default.k}, or every candidate of an --input file; 0 = no limit)")
    p.add_argument("--queries", type=int, help="annotate only the first N queries (by id)")
    judge_option(
        p, f"judge spec, repeatable (default: {' and '.join(default.judges)}, an offline ensemble)", action="append"
    )
    p.add_argument(
        "--cycles",
        type=int,
        default=default.cycles,
        help=f"random cycles per query (default {default.cycles}: ~{2 * default.cycles} battles a document)",
    )
    p.add_argument(
        "--seed", type=int, default=default.seed, help=f"seed of pairs and A/B swaps (default {default.seed})"
    )
    p.add_argument(
        "--ensemble",
        choices=["vote", "mean"],
        default=default.ensemble,
        help="vote: fraction of judges preferring a document (zbench); mean: mean signed score",
    )
    p.add_argument(
        "--prior",
        type=float,
        default=default.prior,
        help=f"Bradley-Terry prior: virtual battles per document (default {default.prior:g})",
    )
    p.add_argument(
        "--anchors",
        type=int,
        default=default.anchors,
        help="cross-query calibration: documents of other queries battled per query as irrelevant anchors; a "
        "document that does not beat them (P < --anchor-threshold) is graded 0 (default 0: grades per query)",
    )
    p.add_argument(
        "--anchor-threshold",
        type=float,
        default=default.anchor_threshold,
        help=f"P(beats the anchors) a document needs to keep its grade (default {default.anchor_threshold})",
    )
    p.add_argument(
        "--price-per-1k",
        type=float,
        help="USD per 1k tokens of LLM judges, for the estimate (default 0.005; per judge: price= option)",
    )
    p.add_argument(
        "--benchmark",
        action="append",
        default=[],
        metavar="SPEC",
        help="benchmark this system against the annotation (repeatable)",
    )
    p.add_argument("--output", metavar="DIR", help="annotation folder (default: results/annotate/<dataset>)")
    p.add_argument("--dry-run", action="store_true", help="print the calls and estimated cost, then stop")
    no_track_option(p)
    experiment_option(p, EXPERIMENT)
    json_option(p, "print the annotation's summary as one JSON object")
    p.set_defaults(func=cmd_annotate, check=check_annotate, runs_flow=True)
    return p


def check_annotate(args: argparse.Namespace) -> None:
    """Judges, the dataset or input file, the systems and the depth, before Prefect or any judge."""
    from irflow.cli.checks import check_dataset, check_depth, check_file, check_llm, check_systems

    for spec in args.judge or ():
        check_llm(spec, "--judge", "judge")  # a bad spec (a URL with credentials) fails before anything is written
    check_depth(args.depth, zero=True)
    if args.input:
        check_file(args.input, "--input", "a zbench QueryDocuments JSONL")
    else:
        check_dataset(args.dataset)
    systems = [s for s in (args.system, *args.benchmark) if s]
    if args.dataset and systems:
        check_systems(args.dataset, [args.system] if args.system else [], split=args.split)
        check_systems(args.dataset, args.benchmark, option="--benchmark", split=args.split)


def cmd_annotate(args: argparse.Namespace) -> int:
    from irflow.tasks.annotate import pipeline
    from irflow.tasks.core.output_folder import check_output

    track = not args.no_track and not args.dry_run
    if track:
        from irflow.tasks.tracking.log import check_tracking

        check_tracking(experiment=args.experiment)  # fail fast: before the plan (a --system retrieval), any judge
    dataset = args.dataset
    if args.input:
        dataset = args.name or "zbench-" + re.sub(r"[^A-Za-z0-9._-]+", "-", Path(args.input).stem)
    config = AnnotateConfig(
        dataset=dataset,
        output=args.output or "",
        split=args.split,
        system=args.system,
        k=(args.depth or None) if args.depth is not None else (None if args.input else AnnotateConfig.k),
        queries=args.queries,
        cycles=args.cycles,
        seed=args.seed,
        ensemble=args.ensemble,
        prior=args.prior,
        price_per_1k=args.price_per_1k,
        benchmark=tuple(args.benchmark),
        anchors=args.anchors,
        anchor_threshold=args.anchor_threshold,
        judges=tuple(args.judge) if args.judge else AnnotateConfig.judges,
    )
    if not args.dry_run:
        check_output(config.output, marker=None)  # before any judge call: an unwritable folder fails at once
    with contextlib.ExitStack() as stack:
        preview = None
        if args.input and args.dry_run:  # a dry run stores nothing: the file is read into a temporary folder
            preview = stack.enter_context(zbench_preview(args.input, dataset, args.split or "test"))
        elif args.input:
            from irflow.tasks.ingest import import_dataset

            import_dataset(args.input, "zbench", dataset, split=args.split)
        planned = pipeline.plan(config, preview, store=not args.dry_run)  # no judge called: the estimate first
        estimate = pipeline.estimate(planned)
    print(
        f"{planned.candidates['query_id'].nunique()} queries, {len(planned.candidates)} documents, "
        f"{len(planned.pairs)} pairs; calls still to make:"
    )
    print(estimate.text())
    if args.dry_run:
        return 0
    from irflow.flows import prefect_api

    prefect_api.ready()
    from irflow.flows.annotate import annotate_flow

    summary = annotate_flow(config, track=track, experiment=args.experiment)
    if args.json:
        print(json.dumps({**summary, "output": config.output}, indent=2, default=str))
        return 0
    print(_report(summary, config.output))
    return 0


@contextlib.contextmanager
def zbench_preview(path: str, name: str, split: str) -> Iterator[Any]:
    """The dataset a zbench file would be imported as, checked and built by the canonical builder in a
    temporary folder that is removed afterwards (``annotate --dry-run --input`` stores nothing)."""
    import tempfile

    import pandas as pd

    from irflow.tasks.core.paths import regular_file
    from irflow.tasks.core.schema import Dataset
    from irflow.tasks.ingest import canonical, store
    from irflow.tasks.ingest.custom import read_zbench

    store.check_import_name(name)
    source = regular_file(path, "a zbench QueryDocuments JSONL")
    parsed = read_zbench(source)
    with tempfile.TemporaryDirectory(prefix="irflow-dry-run-") as tmp:
        folder = Path(tmp)
        origin = {"kind": "zbench", "location": str(source.resolve())}
        manifest = canonical.build_dataset(folder, name, parsed.corpus_source(), [parsed.split(split)], origin)[split]
        candidates = folder / split / "candidates.parquet"
        if candidates.is_file():
            manifest["candidates"] = str(candidates)
        queries, qrels = (pd.read_parquet(folder / split / f"{t}.parquet") for t in ("queries", "qrels"))
        yield Dataset(name, split, pd.read_parquet(folder / "corpus.parquet"), queries, qrels, manifest)


def _report(summary: dict[str, Any], output: str) -> str:
    votes = summary["votes"]
    lines = [
        f"votes: {sum(votes['valid'].values()):,} valid, {sum(votes['missing'].values()):,} missing "
        f"({json.dumps(votes['missing'])})"
    ]
    for pair, value in summary["inter_judge_agreement"].items():
        lines.append(f"agreement {pair}: {_fmt(value['agreement'])} over {value['pairs']} pairs")
    for judge, value in (summary.get("human_grades") or {}).get("battles", {}).items():
        lines.append(f"agreement with human grades, {judge}: {_fmt(value['agreement'])} over {value['pairs']} battles")
    for system, entry in (summary.get("benchmarks") or {}).items():
        for truth, values in entry.items():
            lines.append(f"{system} {truth}: " + ", ".join(f"{m} {_fmt(v)}" for m, v in values.items()))
    lines.append(f"outputs: {output}/ (annotated.jsonl, qrels.trec, zelo.parquet, summary.json, plots/)")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
