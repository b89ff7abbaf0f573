"""A RAG evaluation's result folder and its report's "Answers" section.

Files (published whole, every one written atomically)::

    metrics.json        {"kind": "rag", "dataset", "systems": {CONFIG: {METRIC: mean}}, "summary", "baseline",
                         "configurations", "failures", "usage", ...}
    per_query.parquet   system, query_id, metric, value      (the same long table as ``irflow run``'s)
    failures.csv        system, query_id, metric, error      (every sample without a value, and why)
    answers.jsonl       one line per configuration and query: question, contexts with grades, answer, verdicts
    significance.csv    every configuration against the baseline (tasks.compare.significance)
    report.md, report.html
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.core.atomic import atomic_open, atomic_path, write_json
from irflow.tasks.core.config import irflow_version
from irflow.tasks.core.output_folder import publish
from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import Dataset, IrflowError
from irflow.tasks.rag.score import Configuration, Scores
from irflow.tasks.report.calibration import calibration_text
from irflow.tasks.report.format import md_table, num, signed
from irflow.tasks.report.html import html_report
from irflow.tasks.report.recommendations import VERDICT_LEAD
from irflow.tasks.report.write import dataset_summary
from irflow.tasks.systems.labels import labels_of

MAX_FAILURES_NAMED = 10  # per configuration and metric, in metrics.json and the report
EXAMPLES = 3  # side-by-side examples in the report
SNIPPET = 160  # characters of a context shown in an example


def failure_block(scores: Scores) -> dict[str, Any]:
    """``{system: {metric: {"count", "first": [{"query_id", "error"}]}}}`` of the samples without a value."""
    out: dict[str, Any] = {}
    for (system, metric), rows in scores.failures.groupby(["system", "metric"], sort=False):
        named = rows.head(MAX_FAILURES_NAMED)[["query_id", "error"]].to_dict("records")
        out.setdefault(str(system), {})[str(metric)] = {"count": len(rows), "first": named}
    return out


class JudgeFailedError(IrflowError):
    """Every judge call of a run failed: nothing was LLM-judged."""


def judge_failure(document: Mapping[str, Any]) -> str | None:
    """Why nothing was LLM-judged, when every judge call of a run failed (none answered, none from the cache):
    the judge, the count and the first error, for the command to exit non-zero with; None otherwise. The id-based
    metrics and ``failures.csv`` are written all the same: the message says where."""
    usage = (document.get("usage") or {}).get("judging") or {}
    calls, failed = usage.get("calls", 0), usage.get("failed", 0)
    if not calls or failed < calls or usage.get("cached", 0):
        return None
    errors = (
        named["error"]
        for block in (document.get("failures") or {}).values()
        for metric in block.values()
        for named in metric.get("first", ())
        if str(named.get("error", "")).startswith("judge call failed")
    )
    first = next(errors, "no answer")
    judge = (document.get("options") or {}).get("judge")
    return redact(
        f"--judge {judge}: every judge call failed ({failed} of {calls}); first error: {first}. Nothing was "
        f"LLM-judged: the other metrics and failures.csv are in {document.get('output', 'the result folder')}"
    )


def write_rag_outputs(
    output: str | Path,
    dataset: Dataset,
    configs: Sequence[Configuration],
    scores: Scores,
    summary: Mapping[str, Any],
    comparisons: pd.DataFrame,
    metrics: Sequence[str],
    baseline: str,
    extra: Mapping[str, Any],
) -> dict[str, Any]:
    """Write the result folder ``output`` whole; returns metrics.json's content (``extra``: usage, options)."""
    document: dict[str, Any] = {
        "kind": "rag",
        "dataset": dataset_summary(dataset),
        "systems": {s: {m: v["mean"] for m, v in block.items()} for s, block in summary.items()},
        "summary": dict(summary),
        "baseline": baseline,
        "measures": list(metrics),
        "configurations": {c.name: c.identity for c in configs},
        "labels": labels_of([c.name for c in configs]),  # a spec's label; an answers file's name as it is
        "failures": failure_block(scores),
        "irflow_version": irflow_version(),
        **extra,
    }
    document["verdict"] = rag_verdict(document, comparisons)  # what report.md leads with and the terminal ends on
    grades = {
        (str(q), str(d)): int(g) for q, d, g in dataset.qrels[["query_id", "doc_id", "relevance"]].itertuples(False)
    }
    with publish(output) as build:
        with atomic_path(build / "per_query.parquet") as tmp:
            scores.per_query.to_parquet(tmp, index=False)
        with atomic_path(build / "failures.csv") as tmp:
            scores.failures.to_csv(tmp, index=False)
        with atomic_path(build / "significance.csv") as tmp:
            comparisons.to_csv(tmp, index=False)
        with atomic_open(build / "answers.jsonl", "w", encoding="utf-8") as fh:
            for config in configs:
                for a in config.answers:
                    fh.write(json.dumps(_answer_row(config, a, grades, scores), ensure_ascii=False) + "\n")
        write_json(build / "metrics.json", document)
        text = report_markdown(document, configs, scores, comparisons, grades)
        with atomic_open(build / "report.md", "w", encoding="utf-8") as fh:
            fh.write(text)
        with atomic_open(build / "report.html", "w", encoding="utf-8") as fh:
            fh.write(html_report(document, text, {}))
    return document


def _answer_row(config: Configuration, a: Any, grades: Mapping[tuple[str, str], int], scores: Scores) -> dict[str, Any]:
    pq = scores.per_query
    mine = pq[(pq["system"] == config.name) & (pq["query_id"] == a.query_id)]
    return {
        "system": config.name,
        "query_id": a.query_id,
        "question": a.question,
        "answer": None if a.query_id in config.unanswered else redact(a.answer),
        "error": config.unanswered.get(a.query_id),
        "contexts": [{"doc_id": c.doc_id, "grade": grades.get((a.query_id, c.doc_id or ""))} for c in a.contexts],
        "reference": a.reference,
        "scores": dict(zip(mine["metric"], mine["value"], strict=True)),
        "verdicts": {m: d for (s, m, q), d in scores.verdicts.items() if s == config.name and q == a.query_id},
    }


def _interval(row: Mapping[str, Any]) -> str:
    if row.get("mean") is None:
        return "–"
    text = num(row["mean"])
    if row.get("ci_low") is not None:
        text += f" [{num(row['ci_low'])}, {num(row['ci_high'])}]"
    if row.get("repeat_sd") is not None:
        text += f" ±{num(row['repeat_sd'])} run to run"
    return text + (f" ({row['failed']} failed)" if row.get("failed") else "")


def answers_section(
    document: Mapping[str, Any],
    configs: Sequence[Configuration],
    scores: Scores,
    comparisons: pd.DataFrame,
    grades: Mapping[tuple[str, str], int],
) -> list[str]:
    """The report's "Answers" section: the metric table with CIs, the paired tests, failures, cost, examples."""
    metrics, summary = list(document["measures"]), document["summary"]
    label = config_labels(document)
    lines = ["## Answers", ""]
    lines += [
        "Mean per configuration over the samples that have a value, with its 95% bootstrap CI (BCa); "
        "± run to run: the standard deviation of the mean over judge repeats. Definitions: RAGAS 0.4 "
        "(id-based: the dataset's judgements, relevant = grade ≥ 1).",
        "",
    ]
    rows = [[label[c], *(_interval(summary[c][m]) for m in metrics)] for c in summary]
    lines += md_table(["configuration", *metrics], rows, "l" + "r" * len(metrics)) + [""]
    if len(comparisons):
        lines += [f"### Paired tests against `{label[document['baseline']]}`", ""]
        rows = [
            [r.metric, f"`{label[r.candidate]}`", r.n, signed(r.delta), f"[{signed(r.ci_low)}, {signed(r.ci_high)}]",
             f"{r.p_adjusted:.3g}", "yes" if r.significant else "no"]
            for r in comparisons.itertuples()
        ]  # fmt: skip
        headers = ["metric", "candidate", "queries", "Δ mean", "95% CI", "p (Holm)", "significant"]
        lines += md_table(headers, rows, "llrrrrl")
        lines += ["", "Randomization test on the queries valued in both configurations (failed samples left out).", ""]
    failures = document.get("failures") or {}
    if failures:
        lines += ["### Failed samples", ""]
        for system, block in failures.items():
            for metric, f in block.items():
                named = "; ".join(f"{x['query_id']}: {x['error']}" for x in f["first"][:3])
                lines.append(f"- `{label[system]}` {metric}: {f['count']} without a value ({named})")
        lines.append("")
    usage = document.get("usage") or {}
    if usage:
        lines += ["### LLM calls and cost", ""]
        rows = [
            [stage, u["calls"], u["cached"], u["failed"], u["prompt_tokens"] + u["completion_tokens"],
             u.get("tokens_counted_by") or "–", f"${num(u['usd'])}"]
            for stage, u in usage.items()
        ]  # fmt: skip
        lines += md_table(["stage", "calls", "cached", "failed", "tokens", "counted by", "USD"], rows, "lrrrrlr")
        lines.append("")
    if document.get("calibrated"):
        lines += ["### Calibrated by human verdicts", "", "```text", calibration_text(document), "```", ""]
    lines += examples(configs, scores, grades, metrics, label)
    return lines


def config_labels(document: Mapping[str, Any]) -> Mapping[str, str]:
    """configuration -> label: metrics.json's ``labels``, else (a folder written before labels) each
    configuration's default label; a name it does not know stays as it is."""
    return _Labels(document.get("labels") or labels_of(list(document.get("configurations") or {})))


class _Labels(dict[str, str]):
    """A mapping that names an unknown key by itself."""

    def __missing__(self, key: str) -> str:
        return key


def examples(
    configs: Sequence[Configuration],
    scores: Scores,
    grades: Mapping[tuple[str, str], int],
    metrics: Sequence[str],
    label: Mapping[str, str] | None = None,
) -> list[str]:
    """Side by side, the queries where the configurations' first metric differs most: the question, each
    configuration's contexts with their grades, its answer and the judge's verdicts."""
    pq = scores.per_query[scores.per_query["metric"] == metrics[0]] if metrics else scores.per_query.iloc[:0]
    if pq.empty:
        return []
    spread = (
        pq.groupby("query_id")["value"].agg(lambda v: v.max() - v.min()).sort_values(ascending=False, kind="stable")
    )
    lines = ["### Examples", "", f"The {EXAMPLES} queries on which the configurations' {metrics[0]} differs most.", ""]
    by_config = {c.name: {a.query_id: a for a in c.answers} for c in configs}
    for qid in spread.index[:EXAMPLES]:
        first = next(a for answers in by_config.values() if (a := answers.get(qid)) is not None)
        lines += [f"#### {qid}: {first.question}", ""]
        if first.reference:
            lines += [f"Reference: {first.reference}", ""]
        for config in configs:
            a = by_config[config.name].get(qid)
            if a is None:
                continue
            values = scores.per_query[
                (scores.per_query["system"] == config.name) & (scores.per_query["query_id"] == qid)
            ]
            shown = ", ".join(f"{m} {num(v)}" for m, v in zip(values["metric"], values["value"], strict=True))
            lines.append(f"**`{(label or {}).get(config.name, config.name)}`** ({shown})")
            lines.append("")
            for i, c in enumerate(a.contexts, 1):
                grade = grades.get((qid, c.doc_id or ""))
                source = f"{c.doc_id} (grade {grade if grade is not None else 'unjudged'})" if c.doc_id else "free text"
                text = " ".join(c.text.split())[:SNIPPET]
                lines.append(f"{i}. {source}: {text}")
            answer = config.unanswered.get(qid)
            lines += ["", f"> {redact(a.answer) if answer is None else 'no answer: ' + answer}", ""]
            for (s, m, q), detail in scores.verdicts.items():
                if s == config.name and q == qid and detail:
                    lines.append(f"- {m}: {json.dumps(detail, ensure_ascii=False)[:400]}")
            lines.append("")
    return lines


def rag_verdict(document: Mapping[str, Any], comparisons: pd.DataFrame) -> str:
    """One sentence: the best configuration on the headline (first) metric and its difference to the baseline
    with the interval and the Holm-adjusted p; with human verdicts, the calibrated figures too. report.md's
    first paragraph, the terminal's last line (``RagEvaluation.verdict`` says it)."""
    metric = document["measures"][0]
    label = config_labels(document)  # as the terminal's table names them
    means = {
        label.get(c, c): block[metric]["mean"]
        for c, block in document["summary"].items()
        if block[metric].get("mean") is not None
    }
    base = label.get(document["baseline"], document["baseline"])
    if len(comparisons):
        comparisons = comparisons.assign(candidate=[label.get(c, c) for c in comparisons["candidate"]])
    if not means:
        return f"No configuration has a value of {metric}: every sample failed (see failures)."
    best = max(means, key=lambda c: means[c])
    calibrated = _calibrated_verdict(document, metric)
    if len(document["configurations"]) < 2:
        return f"On {metric}, {best} scores {num(means[best])}; nothing to compare: one configuration.{calibrated}"
    rows = comparisons[comparisons["metric"] == metric].set_index("candidate") if len(comparisons) else None
    if best == base:
        others = [c for c in means if c != base and rows is not None and c in rows.index]
        said = f"On {metric}, no configuration beats the baseline {base} ({num(means[base])})"
        if not others or rows is None:
            return f"{said}.{calibrated}"
        near = max(others, key=lambda c: means[c])
        return f"{said}; the closest, {near}, is {_difference(rows.loc[near])}.{calibrated}"
    said = f"On {metric}, {best} scores highest: {num(means[best])} vs {num(means[base])} for the baseline {base}"
    if rows is None or best not in rows.index:
        return f"{said}.{calibrated}"
    return f"{said}, {_difference(rows.loc[best])}.{calibrated}"


def _difference(r: Any) -> str:
    """``+0.0523 (95% CI [0.0000, +0.1075], Holm-adjusted p = 0.031: significant)``."""
    held = "significant" if bool(r["significant"]) else "not significant"
    return (
        f"{signed(r['delta'])} (95% CI [{signed(r['ci_low'])}, {signed(r['ci_high'])}], "
        f"Holm-adjusted p = {r['p_adjusted']:.3g}: {held} at α = 0.05)"
    )


def _calibrated_verdict(document: Mapping[str, Any], metric: str) -> str:
    """With human verdicts: the calibrated best and its difference to the baseline (PPI++), as a sentence."""
    blocks = {c: b[metric] for c, b in (document.get("calibrated") or {}).items() if metric in b}
    if not blocks:
        return ""
    label = config_labels(document)
    best = max(blocks, key=lambda c: blocks[c]["estimate"])
    b = blocks[best]
    text = (
        f" Calibrated by human verdicts (PPI++): {label[best]} {num(b['estimate'])} "
        f"[{num(b['ci'][0])}, {num(b['ci'][1])}] (judge only {num(b['judge_only'])})"
    )
    if d := b.get("difference"):
        text += (
            f", {signed(d['estimate'])} [{signed(d['ci'][0])}, {signed(d['ci'][1])}] against the baseline "
            f"{label[document['baseline']]}: {d['conclusion']}"
        )
    return text + "."


READABLE = {"generator_spec": "generator", "answers_file": "answers file", "k": "top k", "system": "system"}


def describe_configuration(identity: Mapping[str, Any]) -> str:
    """A configuration's identity for people: ``generator: extractive; system: bm25; top k: 5``."""
    shown = []
    for key, value in identity.items():
        if value is None or key == "generator_kind" and "generator_spec" in identity:
            continue  # the kind is the spec's first word
        name = READABLE.get(key) or key.removeprefix("generator_").replace("_", " ")
        shown.append(f"{name}: {value}")
    return "; ".join(shown)


def report_markdown(
    document: Mapping[str, Any],
    configs: Sequence[Configuration],
    scores: Scores,
    comparisons: pd.DataFrame,
    grades: Mapping[tuple[str, str], int],
) -> str:
    """report.md of a RAG evaluation: what was evaluated, then the "Answers" section."""
    ds = document["dataset"]
    lines = [f"# RAG evaluation: {ds['name']} ({ds['split']})", ""]
    lines += [VERDICT_LEAD + rag_verdict(document, comparisons), ""]
    label = config_labels(document)
    for name, identity in document["configurations"].items():
        spec = "" if label[name] == name else f"spec `{name}`; "
        lines.append(f"- `{label[name]}`: {spec}{describe_configuration(identity)}")
    skipped = document.get("answers_file_problems") or {}
    for config, problems in skipped.items():
        for what, p in problems.items():
            lines.append(
                f"- `{label[config]}`: {p['count']} {what.replace('_', ' ')} left out, e.g. {', '.join(p['first'])}"
            )
    lines.append("")
    lines += answers_section(document, configs, scores, comparisons, grades)
    return "\n".join(lines).rstrip() + "\n"
