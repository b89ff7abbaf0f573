"""The LLM-judged RAG metrics' arithmetic and failure handling, with a scripted judge (no server).

Each figure is checked against an independent computation: scikit-learn's average precision, F1 and
cosine similarity, or plain counting of the scripted verdicts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, f1_score
from sklearn.metrics.pairwise import cosine_similarity

from irflow.tasks.rag.judged import LLM_METRICS, NEEDS_REFERENCE, judge
from irflow.tasks.rag.prompts import PROMPT_SHA256, STEPS
from irflow.tasks.rag.samples import Answer, Context, Prompt, Reply

Script = Callable[[dict[str, Any], int], str | None]


class ScriptedJudge:
    """An ``Ask`` answering each step from a script ``(input, attempt) -> reply text`` (None: the call
    fails); records every batch."""

    def __init__(self, **scripts: Script) -> None:
        self.scripts = scripts
        self.batches: list[list[tuple[str, dict[str, Any], bool]]] = []
        self.steps = {step.system: name for name, step in STEPS.items()}

    def __call__(self, prompts: Sequence[Prompt]) -> list[Reply]:
        batch, replies = [], []
        for prompt in prompts:
            step = self.steps[prompt.system]
            body = prompt.user.split("Input:\n", 1)[1].split("\n\nAnswer with the JSON object only.", 1)[0]
            reminded = "could not be read" in prompt.user
            batch.append((step, json.loads(body), reminded))
            text = self.scripts[step](json.loads(body), 2 if reminded else 1)
            replies.append(Reply(text, None) if text is not None else Reply(None, "HTTP 500 after 3 tries"))
        self.batches.append(batch)
        return replies


def sample(qid: str, answer: str, contexts: Sequence[str], reference: str | None = "ref") -> Answer:
    ctx = tuple(Context(text, f"d{i}") for i, text in enumerate(contexts))
    return Answer(qid, f"question {qid}?", answer, ctx, reference)


def supported_if_marked(data: dict[str, Any], attempt: int) -> str:
    """NLI: a statement is supported iff it contains '+' (the scripts mark them)."""
    verdicts = [{"statement": s, "reason": "r", "verdict": int("+" in s)} for s in data["statements"]]
    return json.dumps({"verdicts": verdicts})


def test_faithfulness_counts_supported_statements_in_two_batched_rounds() -> None:
    answers = [sample("q1", "a+. b. c+.", ["ctx one", "ctx two"]), sample("q2", "x+. y+.", ["ctx"])]
    statements = lambda data, attempt: json.dumps({"statements": data["answer"].rstrip(".").split(". ")})  # noqa: E731
    ask = ScriptedJudge(statements=statements, nli=supported_if_marked)
    got = judge("faithfulness", answers, ask)
    assert [j.value for j in got] == [pytest.approx(2 / 3), 1.0]
    assert [len(b) for b in ask.batches] == [2, 2]  # one batch per round, every answer in it
    assert ask.batches[1][0][1]["context"] == "ctx one\nctx two"  # contexts joined by newlines, as ragas
    assert [r["supported"] for r in got[0].detail["statements"]] == [True, False, True]


def test_answer_relevancy_is_the_mean_cosine_unless_all_noncommittal() -> None:
    rng = np.random.default_rng(7)
    table: dict[str, np.ndarray] = {}

    def embed(texts: Sequence[str]) -> np.ndarray:
        rows = [table.setdefault(t, rng.normal(size=8)) for t in texts]
        return np.array([r / np.linalg.norm(r) for r in rows])

    def questions(data: dict[str, Any], attempt: int) -> str:
        flag = int("dunno" in data["answer"])
        qs = [
            {"question": f"{data['answer']} #{i}", "noncommittal": flag if i else 0} for i in range(data["questions"])
        ]
        if "never" in data["answer"]:
            qs = [dict(q, noncommittal=1) for q in qs]
        return json.dumps({"questions": qs})

    answers = [sample("q1", "plain", ["c"]), sample("q2", "dunno", ["c"]), sample("q3", "never", ["c"])]
    got = judge("answer_relevancy", answers, ScriptedJudge(questions=questions), embed)
    for answer, result in zip(answers[:2], got[:2], strict=True):
        generated = [q["question"] for q in result.detail["questions"]]
        expected = cosine_similarity(embed([answer.question]), embed(generated)).mean()
        assert result.value == pytest.approx(expected, abs=1e-12) and len(generated) == 3
    assert got[2].value == 0.0 and got[2].detail["noncommittal"]  # every generated question noncommittal


@pytest.mark.parametrize("useful", [[1, 0, 1], [0, 0, 1, 1], [1, 1, 1], [0, 1]])
def test_context_precision_is_average_precision(useful: list[int]) -> None:
    contexts = [f"{'useful' if u else 'noise'} {i}" for i, u in enumerate(useful)]
    verdict = lambda data, attempt: json.dumps({"reason": "r", "verdict": int("useful" in data["context"])})  # noqa: E731
    ask = ScriptedJudge(useful=verdict)
    [got] = judge("llm_context_precision_with_reference", [sample("q", "a", contexts)], ask)
    expected = average_precision_score(useful, -np.arange(len(useful)))  # ranked in the order given
    assert got.value == pytest.approx(expected, abs=1e-9)
    assert len(ask.batches) == 1 and len(ask.batches[0]) == len(useful)  # one verdict per context


def test_context_precision_with_no_useful_context_is_zero() -> None:
    ask = ScriptedJudge(useful=lambda data, attempt: json.dumps({"reason": "r", "verdict": 0}))
    [got] = judge("llm_context_precision_with_reference", [sample("q", "a", ["x", "y"])], ask)
    assert got.value == 0.0 and got.error is None


def test_context_recall_is_the_attributed_share_of_reference_statements() -> None:
    def classify(data: dict[str, Any], attempt: int) -> str:
        rows = [
            {"statement": s, "reason": "r", "attributed": int(s in data["context"])} for s in data["answer"].split(". ")
        ]
        return json.dumps({"classifications": rows})

    answers = [sample("q", "a", ["alpha. beta", "gamma"], reference="alpha. gamma. delta")]
    [got] = judge("context_recall", answers, ScriptedJudge(attributed=classify))
    assert got.value == pytest.approx(2 / 3)


def test_factual_correctness_is_claim_f1_rounded_as_ragas() -> None:
    claims = lambda data, attempt: json.dumps({"claims": data["text"].split(". ")})  # noqa: E731
    answers = [sample("q", "a1+. a2+. a3", ["c"], reference="r1+. r2. r3. r4+")]
    [got] = judge("factual_correctness", answers, ScriptedJudge(claims=claims, nli=supported_if_marked))
    tp, fp, fn = 2, 1, 2  # answer claims supported / not; reference claims not supported by the answer
    truth, predicted = [1] * tp + [0] * fp + [1] * fn, [1] * tp + [1] * fp + [0] * fn
    assert got.detail["f1"] == pytest.approx(f1_score(truth, predicted))
    assert got.value == round(f1_score(truth, predicted), 2) == 0.57


def test_an_unparsable_reply_is_asked_again_once_then_named() -> None:
    def flaky(data: dict[str, Any], attempt: int) -> str:
        if "twice" in data["context"]:
            return "I think it is useful."
        return "Sure." if attempt == 1 else '```json\n{"reason": "r", "verdict": 1}\n```'

    ask = ScriptedJudge(useful=flaky)
    answers = [sample("q1", "a", ["once"]), sample("q2", "a", ["twice"])]
    ok, bad = judge("llm_context_precision_with_reference", answers, ask)
    assert ok.value == pytest.approx(1.0) and ok.error is None
    assert bad.value is None and "unparsable judge reply" in (bad.error or "") and "no JSON object" in (bad.error or "")
    assert [[reminded for _, _, reminded in b] for b in ask.batches] == [[False, False], [True, True]]


def test_wrong_verdict_counts_and_failed_calls_are_errors_not_scores() -> None:
    short = lambda data, attempt: json.dumps({"verdicts": [{"statement": "s", "reason": "", "verdict": 1}]})  # noqa: E731
    ask = ScriptedJudge(statements=lambda data, attempt: json.dumps({"statements": ["s1", "s2"]}), nli=short)
    [got] = judge("faithfulness", [sample("q", "a", ["c"])], ask)
    assert got.value is None and "expected 2 verdicts" in (got.error or "")
    failing = ScriptedJudge(attributed=lambda data, attempt: None)
    [got] = judge("context_recall", [sample("q", "a", ["c"])], failing)
    assert got.value is None and got.error == "judge call failed: HTTP 500 after 3 tries"
    assert len(failing.batches) == 1  # a failed call is not asked again (the client already retried)


def test_missing_inputs_are_named_without_a_call() -> None:
    ask = ScriptedJudge()
    for metric in NEEDS_REFERENCE:
        [got] = judge(metric, [sample("q", "a", ["c"], reference=None)], ask)
        assert got == got.__class__(None, "no reference answer")
    [got] = judge("faithfulness", [sample("q", "a", [])], ask)
    assert got.error == "no contexts"
    assert ask.batches == []
    with pytest.raises(ValueError, match="unknown LLM-judged metric"):
        judge("faithfullness", [], ask)
    assert set(LLM_METRICS) > NEEDS_REFERENCE and len(PROMPT_SHA256) == 64


def test_answer_relevancy_needs_as_many_questions_as_asked() -> None:
    def questions(data: dict[str, Any], attempt: int) -> str:
        n = data["questions"] if "good" in data["answer"] and attempt == 2 else 1
        return json.dumps({"questions": [{"question": f"gen{i}?", "noncommittal": 0} for i in range(n)]})

    def embed(texts: Sequence[str]) -> np.ndarray:
        return np.array([[1.0, 0.0] if t.startswith("gen") else [0.6, 0.8] for t in texts])

    ask = ScriptedJudge(questions=questions)
    good, bad = judge("answer_relevancy", [sample("a", "good", ["c"]), sample("b", "bad", ["c"])], ask, embed)
    assert good.value == pytest.approx(0.6) and len(good.detail["questions"]) == 3  # asked again, then right
    assert bad.value is None and "expected 3 questions, got 1" in (bad.error or "")
    with pytest.raises(ValueError, match="needs an embedding model"):
        judge("answer_relevancy", [sample("a", "good", ["c"])], ask)
