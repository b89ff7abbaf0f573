"""``irflow rag``: evaluate the answers of a RAG pipeline (the ``rag`` flow): a team's answers files, or
irflow systems' top k into a generator; print the metric table and where everything went."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def check_rag(args: argparse.Namespace) -> None:
    """Every answers file, the dataset, the systems, the generator, the judge, the embedder, the metrics and
    the baseline (:func:`irflow.api.rag_request.validate_rag`), before Prefect, a model or a corpus."""
    from irflow.api.rag_request import MAX_K, validate_rag
    from irflow.cli.checks import (
        check_dataset,
        check_depth,
        check_embedder,
        check_file,
        check_human,
        check_llm,
        check_systems,
    )

    check_dataset(args.dataset)
    for path in args.answers or ():
        check_file(path, "--answers", "JSON lines of answers {query_id, answer, contexts, reference?}")
    check_human(args.human, answers=True)  # a file: a stored dataset judges documents, not answers
    check_depth(args.depth, high=MAX_K)
    if args.system:
        check_systems(args.dataset, args.system, split=args.split)
    check_llm(args.generator, "--generator", "generator")
    check_llm(args.judge, "--judge")
    check_embedder(args.embedder)
    args.specs, _, args.metrics, _, _ = validate_rag(
        args.dataset,
        list(args.system or []),
        list(args.answers or []),
        args.generator,
        args.depth,
        args.metric,
        args.judge,
        args.judge_repeats,
        args.baseline,
        args.human,
    )


def cmd_rag(args: argparse.Namespace) -> int:
    from irflow.cli.orchestration import configure_run, run_summary, stage_libraries
    from irflow.flows.rag import rag_flow

    if getattr(args, "specs", None) is None:
        check_rag(args)
    systems, answers = list(args.system or []), list(args.answers or [])
    specs, metrics = args.specs, args.metrics
    if args.dry_run:
        return _print_plan(args, specs, metrics)
    flow, extra = configure_run(args, stage_libraries(specs), rag_flow)
    document = flow(
        dataset=args.dataset,
        systems=systems,
        answers=answers,
        generator=args.generator,
        k=args.depth,
        metrics=metrics,
        split=args.split,
        output=args.output,
        baseline=args.baseline,
        judge=args.judge,
        embedder=args.embedder,
        judge_repeats=args.judge_repeats,
        human=args.human,
        overwrite=args.overwrite,
        **extra,
    )
    if args.json:
        import json

        print(json.dumps(document, indent=2, default=str))
        return _judged(document)
    print()
    print(summary_table(document))
    for config, problems in (document.get("answers_file_problems") or {}).items():
        for what, p in problems.items():
            print(f"{config}: {p['count']} {what.replace('_', ' ')} left out, e.g. {', '.join(p['first'])}")
    if document.get("calibrated"):
        from irflow.tasks.report.calibration import calibration_text

        print("\n" + calibration_text(document))
    from irflow.cli.terminal import print_verdict

    print_verdict(document.get("verdict"))  # the sentence RagEvaluation.verdict and report.md say
    files = ("report.html", "report.md", "significance.csv", "metrics.json", "per_query.parquet", "answers.jsonl")
    written = [f for f in (*files, "failures.csv") if (Path(document["output"]) / f).exists()]
    print(f"\nresults: {document['output']}/\n  {', '.join(written)}")
    print(run_summary(document))
    return _judged(document)


def _judged(document: dict[str, Any]) -> int:
    """0, or JudgeFailedError (exit 2) when every judge call failed: a run that judged nothing must not look like
    one that did (its other metrics and failures.csv are written all the same)."""
    from irflow.tasks.rag.outputs import JudgeFailedError, judge_failure

    failure = judge_failure(document)
    if failure is not None:
        raise JudgeFailedError(failure)
    return 0


def summary_table(document: dict[str, Any]) -> str:
    """Each configuration's means with their CIs as plain text, configurations by their readable labels
    (``hybrid:bm25+dense:all-MiniLM-L6-v2``; an answers file's name as it is)."""
    from irflow.tasks.rag.outputs import config_labels
    from irflow.tasks.report.format import num

    metrics, summary = document["measures"], document["summary"]
    labels = {c: config_labels(document)[c] for c in summary}
    width = max(len(label) for label in labels.values()) + 2
    lines = [" " * width + "".join(f"{m:>34}" for m in metrics)]
    for config, block in summary.items():
        cells = []
        for m in metrics:
            row = block[m]
            cell = "–" if row["mean"] is None else num(row["mean"])
            if row.get("ci_low") is not None:
                cell += f" [{num(row['ci_low'], 3)}, {num(row['ci_high'], 3)}]"
            if row.get("failed"):
                cell += f" ({row['failed']} failed)"
            cells.append(f"{cell:>34}")
        lines.append(f"{labels[config]:<{width}}" + "".join(cells))
    return "\n".join(lines)


def _print_plan(args: argparse.Namespace, specs: list[str], metrics: list[str]) -> int:
    """``irflow rag --dry-run``: the LLM calls, tokens and USD of generation and judging; nothing is sent."""
    from irflow.tasks.rag.plan import rag_plan

    for row in rag_plan(
        args.dataset,
        args.split,
        specs,
        list(args.answers or []),
        args.generator,
        args.depth,
        metrics,
        args.judge,
        args.judge_repeats,
    ):
        print(
            f"{row['stage']} ({row['model']}): {row['calls']:,} calls ({row['cached_calls']:,} cached), "
            f"~{row['tokens']:,} tokens, ${row['usd']:,.4f} at ${row['price_per_1k']}/1k tokens"
        )
    print("(dry run: nothing was sent)")
    return 0


def add_rag_parser(sub: Any) -> None:
    """Register ``irflow rag``."""
    from irflow.cli.options import (
        baseline_option,
        dataset_option,
        depth_option,
        embedder_option,
        human_option,
        json_option,
        judge_option,
        option,
    )
    from irflow.cli.orchestration import add_run_options

    p = sub.add_parser("rag", help="evaluate a RAG pipeline's answers (RAGAS metrics, paired tests, report)")
    dataset_option(p, "dataset name (default: techdocs)", default="techdocs")
    p.add_argument("--split", help="split (default: test; dev for MS MARCO)")
    p.add_argument(
        "--answers",
        action="append",
        metavar="FILE",
        help="a pipeline's answers, JSON lines {query_id, answer, contexts, reference?}; repeatable",
    )
    p.add_argument("--system", action="append", metavar="SPEC", help="retrieve each question's contexts; repeatable")
    option(
        p,
        "--generator",
        metavar="SPEC",
        help="the LLM that writes the answers: extractive | python:MODULE:CALLABLE | openai(OPTIONS):MODEL[@BASE_URL] "
        "(with --system)",
    )
    depth_option(p, "contexts per question from each system (default 5)", default=5)
    p.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="RAG metric, repeatable (default: the id-based ones, and the LLM-judged ones with --judge)",
    )
    baseline_option(
        p, "the system (or answers file) the others are compared with (a spec or a file name; default: the first)"
    )
    judge_option(p, "the LLM judge, e.g. openai(rpm=60):gpt-4o-mini")
    embedder_option(p, "embedding model of answer relevancy (default: minilm)")
    p.add_argument("--judge-repeats", type=int, default=1, help="ask the judge N times: run-to-run noise (default 1)")
    human_option(
        p,
        "human verdicts on some answers, a file (JSONL/CSV: query_id, metric, value, system?): calibrate the judge "
        "(PPI++); a stored dataset is refused (it judges documents, not answers)",
    )
    p.add_argument("--output", metavar="DIR", help="result folder (default: a new results/<dataset>/rag/<run name>/)")
    p.add_argument("--overwrite", action="store_true", help="replace the results of another run in --output")
    p.add_argument("--dry-run", action="store_true", help="print the LLM calls, tokens and USD, send nothing")
    json_option(p, "print the result as one JSON object (metrics.json's content)")
    p.set_defaults(func=cmd_rag, check=check_rag, runs_flow=True)
    add_run_options(p)
