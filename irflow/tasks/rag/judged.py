"""The LLM-judged RAG metrics, defined as ragas 0.4.3 defines them (Es, James, Espinosa-Anke & Schockaert,
"RAGAS: Automated Evaluation of Retrieval Augmented Generation", EACL 2024 demos; the ragas documentation,
"Available metrics", and its source ``ragas/metrics/collections``):

* ``faithfulness`` = |statements of the answer inferable from the contexts| / |statements|: the answer is
  broken into standalone statements, then each is judged (NLI) against the contexts joined by newlines.
* ``answer_relevancy`` = mean cosine similarity between the question and ``STRICTNESS`` (3) questions the
  judge writes for the answer, × 0 when every one of them finds the answer noncommittal.
* ``llm_context_precision_with_reference`` = Σₖ (precision@k · vₖ) / (Σₖ vₖ + 1e-10), vₖ = 1 when the k-th
  context was useful in arriving at the reference answer (one verdict per context): average precision.
* ``context_recall`` = |statements of the reference attributable to the contexts| / |statements|.
* ``factual_correctness`` (mode f1, β = 1, as ragas' default): answer and reference are decomposed into
  claims; TP = answer claims the reference supports, FP = the others, FN = reference claims the answer does
  not support; F1 = 2·P·R / (P + R), rounded to 2 decimals as ragas does (unrounded values in ``detail``).

Every step of every answer goes to the judge in one batch per round (faithfulness and factual correctness
take two rounds). A reply that cannot be parsed is asked again once with a format reminder; if that fails
too, or the call failed, or an input is missing, the sample's value is None and ``error`` says why (never
NaN, never a 0 or 1 stand-in). irflow also names what ragas scores silently: no statements (ragas: NaN), a
reply with fewer verdicts than statements, or other than ``STRICTNESS`` questions (ragas: scored on what came
back). At the edges it scores as ragas 0.4.3 does: an empty generated question is dropped (no question left:
0), and a text without claims counts no claim in ``factual_correctness`` (no claims in the answer: 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from irflow.tasks.rag.prompts import (
    ATTRIBUTED,
    CLAIMS,
    NLI,
    PROMPT_SHA256,
    PROMPT_VERSION,
    QUESTIONS,
    STATEMENTS,
    USEFUL,
    Step,
    parse,
    remind,
    render,
)
from irflow.tasks.rag.samples import Answer, Ask, Prompt, Reply

__all__ = [
    "LLM_METRICS",
    "NEEDS_REFERENCE",
    "PROMPT_SHA256",
    "PROMPT_VERSION",
    "STRICTNESS",
    "Embed",
    "Judged",
    "average_precision",
    "f_beta",
    "judge",
]

LLM_METRICS: tuple[str, ...] = (
    "faithfulness",
    "answer_relevancy",
    "llm_context_precision_with_reference",
    "context_recall",
    "factual_correctness",
)
NEEDS_REFERENCE: frozenset[str] = frozenset(
    {"llm_context_precision_with_reference", "context_recall", "factual_correctness"}
)
STRICTNESS = 3  # questions generated per answer for answer_relevancy (ragas' default)

Embed = Callable[[Sequence[str]], np.ndarray]
"""Texts in, one L2-normalised embedding row each out."""


@dataclass(frozen=True)
class Judged:
    """One sample's score: ``value``, or None with ``error`` saying why; ``detail`` holds the judge's
    verdicts (statements, whether supported, reasons) for the report."""

    value: float | None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Call:
    step: Step
    prompt: Prompt
    expected: int | None = None  # items the reply must hold: a verdict per statement, or STRICTNESS questions


@dataclass(frozen=True)
class _Got:
    value: Any = None
    error: str | None = None


def _check(call: _Call, text: str) -> Any:
    reply = parse(call.step, text)
    if call.expected is not None:
        items, what = (reply.questions, "questions") if call.step is QUESTIONS else (reply.verdicts, "verdicts")
        if len(items) != call.expected:
            raise ValueError(f"expected {call.expected} {what}, got {len(items)}")
    return reply


def _batch(ask: Ask, prompts: list[Prompt]) -> list[Reply]:
    replies = ask(prompts)
    if len(replies) != len(prompts):
        raise RuntimeError(f"the judge returned {len(replies)} replies to {len(prompts)} prompts")
    return replies


def _read(call: _Call, reply: Reply) -> _Got | str:
    """The parsed reply, a failed call's error, or (a str) why the reply is unreadable."""
    if reply.text is None:
        return _Got(error=f"judge call failed: {reply.error or 'no reply'}")
    try:
        return _Got(_check(call, reply.text))
    except ValueError as err:
        return str(err)


def _ask(ask: Ask, calls: Sequence[_Call]) -> list[_Got]:
    """One round: every call in one batch; the unreadable replies asked again once, with a reminder."""
    if not calls:
        return []
    first = [_read(call, reply) for call, reply in zip(calls, _batch(ask, [c.prompt for c in calls]), strict=True)]
    again = [i for i, got in enumerate(first) if isinstance(got, str)]
    second = _batch(ask, [remind(calls[i].prompt, str(first[i])) for i in again]) if again else []
    for i, reply in zip(again, second, strict=True):
        got = _read(calls[i], reply)
        first[i] = (
            got if isinstance(got, _Got) else _Got(error=f"unparsable judge reply, also after a format reminder: {got}")
        )
    return [got for got in first if isinstance(got, _Got)]


def _missing(metric: str, answer: Answer) -> str | None:
    """Why ``answer`` cannot be judged on ``metric``, or None."""
    needs_answer = metric in ("faithfulness", "answer_relevancy", "factual_correctness")
    needs_contexts = metric in ("faithfulness", "llm_context_precision_with_reference", "context_recall")
    if not answer.question.strip() and metric != "factual_correctness":
        return "no question"
    if needs_answer and not answer.answer.strip():
        return "empty answer"
    if needs_contexts and not answer.contexts:
        return "no contexts"
    if metric in NEEDS_REFERENCE and not (answer.reference or "").strip():
        return "no reference answer"
    return None


def _context(answer: Answer) -> str:
    return "\n".join(c.text for c in answer.contexts)


def _verdict_rows(statements: Sequence[str], verdicts: Any) -> list[dict[str, Any]]:
    return [
        {"statement": s, "supported": bool(v.verdict), "reason": v.reason}
        for s, v in zip(statements, verdicts.verdicts, strict=True)
    ]


def _faithfulness(answers: Sequence[Answer], ask: Ask) -> list[Judged]:
    extracted = _ask(
        ask, [_Call(STATEMENTS, render(STATEMENTS, question=a.question, answer=a.answer)) for a in answers]
    )
    out: list[Judged | None] = [None] * len(answers)
    calls: list[_Call] = []
    where: list[int] = []
    for i, (answer, got) in enumerate(zip(answers, extracted, strict=True)):
        if got.error is not None:
            out[i] = Judged(None, got.error)
        elif not got.value.statements:
            out[i] = Judged(None, "the judge found no statements in the answer")
        else:
            statements = got.value.statements
            calls.append(_Call(NLI, render(NLI, context=_context(answer), statements=statements), len(statements)))
            where.append(i)
    for i, got in zip(where, _ask(ask, calls), strict=True):
        statements = extracted[i].value.statements
        if got.error is not None:
            out[i] = Judged(None, got.error, {"statements": [{"statement": s} for s in statements]})
            continue
        rows = _verdict_rows(statements, got.value)
        out[i] = Judged(sum(r["supported"] for r in rows) / len(rows), None, {"statements": rows})
    return [j for j in out if j is not None]


def _answer_relevancy(answers: Sequence[Answer], ask: Ask, embed: Embed | None) -> list[Judged]:
    if embed is None:
        raise ValueError("answer_relevancy needs an embedding model (embed)")
    replies = _ask(
        ask, [_Call(QUESTIONS, render(QUESTIONS, answer=a.answer, questions=STRICTNESS), STRICTNESS) for a in answers]
    )
    texts: list[str] = []
    spans: list[tuple[int, int]] = []
    for answer, got in zip(answers, replies, strict=True):
        asked = [q.question for q in _kept(got)]
        spans.append((len(texts), len(asked)))
        if asked:
            texts.extend([answer.question, *asked])
    vectors = np.asarray(embed(texts), dtype=np.float64) if texts else np.zeros((0, 0))
    out = []
    for got, (start, count) in zip(replies, spans, strict=True):
        if got.error is not None:
            out.append(Judged(None, got.error))
            continue
        kept = _kept(got)
        dropped = len(got.value.questions) - len(kept)
        if not kept:  # ragas: no question generated scores 0.0
            out.append(Judged(0.0, None, {"questions": [], "dropped_empty": dropped, "noncommittal": False}))
            continue
        question, generated = vectors[start], vectors[start + 1 : start + 1 + count]
        cosine = generated @ question / (np.linalg.norm(generated, axis=1) * np.linalg.norm(question))
        noncommittal = all(q.noncommittal for q in kept)
        rows = [
            {"question": q.question, "noncommittal": bool(q.noncommittal), "similarity": float(c)}
            for q, c in zip(kept, cosine, strict=True)
        ]
        value = 0.0 if noncommittal else float(cosine.mean())
        detail = {"questions": rows, "noncommittal": noncommittal} | ({"dropped_empty": dropped} if dropped else {})
        out.append(Judged(value, None, detail))
    return out


def _kept(got: _Got) -> list[Any]:
    """The generated questions ragas 0.4.3 keeps: an empty one is dropped with its noncommittal flag
    (``if result.question:``), so it counts neither in the mean similarity nor in "all noncommittal"."""
    return [q for q in got.value.questions if q.question] if got.error is None else []


def average_precision(verdicts: Sequence[int]) -> float:
    """ragas' context precision: Σₖ (precision@k · vₖ) / (Σₖ vₖ + 1e-10)."""
    hits = np.cumsum(verdicts)
    numerator = sum(hits[k] / (k + 1) * v for k, v in enumerate(verdicts))
    return float(numerator / (sum(verdicts) + 1e-10))


def _context_precision(answers: Sequence[Answer], ask: Ask) -> list[Judged]:
    calls = [
        _Call(USEFUL, render(USEFUL, question=a.question, context=c.text, answer=a.reference))
        for a in answers
        for c in a.contexts
    ]
    replies = iter(_ask(ask, calls))
    out = []
    for answer in answers:
        got = [next(replies) for _ in answer.contexts]
        failed = next((g.error for g in got if g.error is not None), None)
        rows: list[dict[str, Any]] = [
            {"doc_id": c.doc_id, "useful": bool(g.value.verdict), "reason": g.value.reason}
            if g.error is None
            else {"doc_id": c.doc_id, "error": g.error}
            for c, g in zip(answer.contexts, got, strict=True)
        ]
        if failed is not None:
            out.append(Judged(None, failed, {"contexts": rows}))
        else:
            verdicts = [int(g.value.verdict) for g in got]
            out.append(Judged(average_precision(verdicts), None, {"contexts": rows}))
    return out


def _context_recall(answers: Sequence[Answer], ask: Ask) -> list[Judged]:
    calls = [
        _Call(ATTRIBUTED, render(ATTRIBUTED, question=a.question, context=_context(a), answer=a.reference))
        for a in answers
    ]
    out = []
    for got in _ask(ask, calls):
        if got.error is not None:
            out.append(Judged(None, got.error))
        elif not got.value.classifications:
            out.append(Judged(None, "the judge found no statements in the reference answer"))
        else:
            rows = [
                {"statement": c.statement, "supported": bool(c.attributed), "reason": c.reason}
                for c in got.value.classifications
            ]
            out.append(Judged(sum(r["supported"] for r in rows) / len(rows), None, {"statements": rows}))
    return out


def f_beta(tp: int, fp: int, fn: int, beta: float = 1.0) -> float:
    """F-beta of claim counts, as ragas' ``fbeta_score``: 0 when precision and recall are both 0."""
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    if precision == 0 and recall == 0:
        return 0.0
    return (1 + beta**2) * precision * recall / (beta**2 * precision + recall)


def _factual_correctness(answers: Sequence[Answer], ask: Ask) -> list[Judged]:
    texts = [(a.answer, a.reference or "") for a in answers]
    decomposed = _ask(ask, [_Call(CLAIMS, render(CLAIMS, text=t)) for pair in texts for t in pair])
    out: list[Judged | None] = [None] * len(answers)
    calls: list[_Call] = []
    where: list[tuple[int, int]] = []  # (answer, side): side 0 = the answer's claims against the reference
    for i, (answer_text, reference) in enumerate(texts):
        own, ref = decomposed[2 * i], decomposed[2 * i + 1]
        failed = own.error or ref.error
        if failed is not None:
            out[i] = Judged(None, failed)
            continue
        # a side without claims is verified by no call and counts nothing, as ragas 0.4.3 does
        # (``_decompose_and_verify_claims`` returns an empty array): no claims in the answer scores 0
        for side, (claims, premise) in enumerate(((own.value.claims, reference), (ref.value.claims, answer_text))):
            if claims:
                calls.append(_Call(NLI, render(NLI, context=premise, statements=claims), len(claims)))
                where.append((i, side))
    verified = dict(zip(where, _ask(ask, calls), strict=True))
    for i in range(len(answers)):
        if out[i] is not None:
            continue
        got = [verified.get((i, side)) for side in (0, 1)]
        failed = next((g.error for g in got if g is not None and g.error is not None), None)
        if failed is not None:
            out[i] = Judged(None, failed)
            continue
        rows = [
            _verdict_rows(decomposed[2 * i + side].value.claims, g.value) if g is not None else []
            for side, g in enumerate(got)
        ]
        answer_rows, reference_rows = rows
        tp = sum(r["supported"] for r in answer_rows)
        fp = len(answer_rows) - tp
        fn = sum(not r["supported"] for r in reference_rows)
        f1 = f_beta(tp, fp, fn)
        detail = {
            "answer_claims": answer_rows,
            "reference_claims": reference_rows,
            "precision": tp / (tp + fp) if tp + fp else 0.0,
            "recall": tp / (tp + fn) if tp + fn else 0.0,
            "f1": f1,
        }
        out[i] = Judged(float(np.round(f1, 2)), None, detail)
    return [j for j in out if j is not None]


def judge(metric: str, answers: Sequence[Answer], ask: Ask, embed: Embed | None = None) -> list[Judged]:
    """``metric`` (one of :data:`LLM_METRICS`) of every answer, in order; ``embed`` is needed for
    ``answer_relevancy``. Samples missing an input the metric needs get an error, not a call."""
    if metric not in LLM_METRICS:
        raise ValueError(f"unknown LLM-judged metric {metric!r}; expected one of {', '.join(LLM_METRICS)}")
    reasons = [_missing(metric, a) for a in answers]
    ready = [a for a, why in zip(answers, reasons, strict=True) if why is None]
    if metric == "faithfulness":
        scored = _faithfulness(ready, ask)
    elif metric == "answer_relevancy":
        scored = _answer_relevancy(ready, ask, embed)
    elif metric == "llm_context_precision_with_reference":
        scored = _context_precision(ready, ask)
    elif metric == "context_recall":
        scored = _context_recall(ready, ask)
    else:
        scored = _factual_correctness(ready, ask)
    results = iter(scored)
    return [next(results) if why is None else Judged(None, why) for why in reasons]
