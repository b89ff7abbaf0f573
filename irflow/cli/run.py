"""``irflow run``: evaluate systems on a dataset (the ``evaluate`` flow), print the table and where
everything went; ``--dry-run`` prices the API embedding calls instead."""

from __future__ import annotations

import argparse
from typing import Any

from irflow.cli.options import baseline_option, dataset_option, depth_option, human_option, json_option
from irflow.cli.orchestration import add_run_options
from irflow.cli.terminal import failures_text, metrics_table, print_outcome


def check_run(args: argparse.Namespace) -> None:
    """Every argument of ``irflow run`` checked (:func:`irflow.api.make_request`), before Prefect is imported."""
    from irflow.api.request import DEFAULT_METRICS, DEFAULT_SYSTEMS
    from irflow.flows.request import request_of

    args.systems = list(args.system or DEFAULT_SYSTEMS)
    args.metrics = list(args.metric or DEFAULT_METRICS)
    args.labels = labels_of(args, args.systems)
    args.request = request_of(
        args.dataset,
        args.systems,
        args.metrics,
        split=args.split,
        depth=args.depth,
        latency_runs=args.latency_runs,
        baseline=args.baseline,
        seed=args.seed,
        human=args.human,
        labels=args.labels,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from irflow.cli.orchestration import configure_run, run_summary, stage_libraries
    from irflow.flows.evaluate import SystemsFailed, claim_output, evaluation_name, release_output

    if getattr(args, "request", None) is None:
        check_run(args)
    systems, metrics, request = args.systems, args.metrics, args.request
    if args.dry_run:
        return _print_api_plan(args, systems)
    output = claim_output(args.dataset, args.output, args.overwrite, evaluation_name(args.dataset, request.specs))
    try:
        flow, extra = configure_run(args, stage_libraries(request.specs))  # the tracking store is checked first
        evaluation = _evaluation_of(
            flow,
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
            human=args.human,
            **extra,
        )
    finally:
        if args.output is None:
            release_output(output)  # only when the run left it empty
    document = evaluation.to_dict()
    if args.json:
        import json

        print(json.dumps({**document, "output": str(output)}, indent=2, default=str))
        if evaluation.failed:
            raise SystemsFailed(f"{len(evaluation.failed)} systems failed (see the JSON's failed)")
        return 0
    print()
    print(metrics_table(document))
    if document.get("failed"):
        print(failures_text(document))
    if document.get("calibrated"):
        from irflow.tasks.report.calibration import calibration_text

        print("\n" + calibration_text(document))
    print_outcome(output, evaluation.verdict)
    print(run_summary(document), flush=True)
    if evaluation.failed:
        failed = len(evaluation.failed)
        raise SystemsFailed(
            f"{failed} of {failed + len(evaluation.systems)} systems failed (listed under the table); "
            f"the others' results are in {output}"
        )
    return 0


def _evaluation_of(flow: Any, **parameters: Any) -> Any:
    """The flow's Evaluation, also when some systems failed: the flow run then ends FAILED, and its error carries
    the others' results (listed under the table before the command fails)."""
    from irflow.flows.evaluate import SystemsFailed

    try:
        return flow(**parameters)
    except SystemsFailed as failed:
        if failed.evaluation is None:
            raise
        return failed.evaluation


def _print_api_plan(args: argparse.Namespace, systems: list[str]) -> int:
    """``irflow run --dry-run``: what the API embedding models would be asked, and cost; nothing is sent."""
    from irflow.tasks.embed.vectors import api_plan
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


MAX_LABEL_CHARS = 60


class LabelAction(argparse.Action):
    """``--label TEXT`` names the ``--system`` given just before it (a spec may itself hold ``=``)."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, value: Any, option: str | None = None) -> None:
        text, given = " ".join(str(value).split()), len(namespace.system or [])
        if not given:
            parser.error(f"--label {value!r}: a label names the --system given just before it; none was given yet")
        if not text or len(text) > MAX_LABEL_CHARS:
            parser.error(f"--label {value!r}: expected 1 to {MAX_LABEL_CHARS} characters")
        labels = dict(namespace.label or {})
        if given - 1 in labels:
            parser.error(f"--label {value!r}: the --system before it already has the label {labels[given - 1]!r}")
        if text in labels.values():
            parser.error(f"--label {value!r}: another --system has this label already")
        labels[given - 1] = text
        namespace.label = labels


def labels_of(args: argparse.Namespace, systems: list[str]) -> dict[str, str]:
    """``--label`` as canonical spec -> label."""
    from irflow.tasks.systems.specs import as_spec

    return {str(as_spec(systems[i])): label for i, label in (getattr(args, "label", None) or {}).items()}


def add_run_parser(sub: Any) -> None:
    """Register ``irflow run``."""
    p = sub.add_parser("run", help="evaluate systems on a dataset (default: the demo dataset techdocs)")
    dataset_option(p, "dataset name (default: techdocs)", default="techdocs")
    p.add_argument("--split", help="split (default: test; dev for MS MARCO)")
    p.add_argument(
        "--system",
        action="append",
        metavar="SPEC",
        help="system spec, repeatable (default: bm25, dense:minilm, hybrid:bm25+dense:minilm)",
    )
    p.add_argument(
        "--label",
        action=LabelAction,
        metavar="TEXT",
        help="the label of the --system just before it, in the report, the table and MLflow "
        "(e.g. --system bm25:k1=0.9 --label 'tuned BM25'; default: a readable one of its spec)",
    )
    p.add_argument("--metric", action="append", metavar="NAME", help="metric, repeatable (e.g. nDCG@10, R@100)")
    baseline_option(p)
    depth_option(p, "hits per query, at most 1000 (default 100; a run file: every line, as trec_eval reads it)", old=())
    p.add_argument(
        "--output", metavar="DIR", help="result folder (default: a new results/<dataset>/<run name>/ and a latest link)"
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace the results of another run in --output (refused otherwise)"
    )
    human_option(
        p,
        "human judgements of some of --dataset's queries, a stored dataset or a file (a qrels file or a filled "
        "sheet): calibrate the judge's means by them (PPI++)",
    )
    p.add_argument("--latency-runs", type=int, default=3, help="timed repetitions per query (0: skip latency)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the calls, tokens and USD of API embedding models, run nothing"
    )
    json_option(p, "print the evaluation as one JSON object (metrics.json's content) instead of the table")
    p.set_defaults(func=cmd_run, check=check_run, runs_flow=True)
    add_run_options(p)
