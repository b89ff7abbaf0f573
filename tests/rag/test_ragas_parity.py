"""ragas 0.4 and irflow score the same samples alike, judged by one scripted OpenAI-compatible server.

The server (tests/support/ragas_judge.py, a subprocess on 127.0.0.1, stopped by its PID) answers ragas'
structured prompts and irflow's from one deterministic oracle; both sides embed with the local MiniLM
(ragas through its own ``HuggingFaceEmbeddings`` wrapper). Every per-sample score of every LLM-judged
metric must agree to 1e-6.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import types
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if importlib.util.find_spec("ragas") is None:  # installed, it must import: no importorskip hiding a breakage
    pytest.skip("the parity test needs ragas 0.4 (pip install -e '.[test]')", allow_module_level=True)

from support.services import script_server

from irflow.tasks.embed.inference import encode
from irflow.tasks.embed.models import resolve_model
from irflow.tasks.rag.judged import LLM_METRICS, judge
from irflow.tasks.rag.samples import Answer, Context, Prompt, Reply

SERVICE = "support.ragas_judge"
pytestmark = pytest.mark.filterwarnings("ignore:`langchain-community` is being sunset:DeprecationWarning")

SAMPLES = [
    Answer(
        "q1",
        "How often do signing keys rotate?",
        "Signing keys rotate every ninety days. Rotation needs the admin console. Keys expire after a year.",
        (
            Context("Signing keys rotate every ninety days through the admin console.", "d1"),
            Context("Backups run nightly at midnight.", "d2"),
        ),
        "Signing keys rotate every ninety days through the admin console. Old keys expire after one year.",
    ),
    Answer(
        "q2",
        "When do backups run?",
        "Perhaps backups run nightly. Snapshots stay for thirty days.",
        (
            Context("Logs are kept for a week.", "d3"),
            Context("Backups run nightly at midnight and snapshots stay thirty days.", "d2"),
            Context("Nightly backups include every database.", "d4"),
        ),
        "Backups run nightly at midnight. Every database is included.",
    ),
    Answer(
        "q3",
        "Which port does the dashboard use?",
        "I am not sure which port the dashboard uses.",
        (Context("The dashboard listens on port 8080 behind the proxy.", "d5"),),
        "The dashboard listens on port 8080.",
    ),
    Answer(
        "q4",
        "How are alerts delivered?",
        "Alerts arrive by email. Critical alerts also page the oncall engineer. Slack delivery is planned.",
        (
            Context("Critical alerts page the oncall engineer within minutes.", "d6"),
            Context("Alerts arrive by email to the team list.", "d7"),
        ),
        "Alerts arrive by email; critical alerts page the oncall engineer.",
    ),
]


# The edges: an answer without claims or content words (every generated question empty, no claim to verify),
# and one whose first generated question is empty beside a reference without claims.
EDGES = [
    Answer(
        "q5",
        "Is the release ready?",
        "Yes.",
        (Context("The release ships on Friday.", "d8"),),
        "The release ships on Friday.",
    ),
    Answer(
        "q6",
        "Where are blank forms kept?",
        "Blank forms are kept in the archive. Archive access needs a badge.",
        (Context("Forms are kept in the archive room.", "d9"),),
        "Ok.",
    ),
]


def http_ask(url: str) -> Any:
    """An irflow ``Ask`` over plain HTTP: one chat completion per prompt, in order."""

    def ask(prompts: Sequence[Prompt]) -> list[Reply]:
        replies = []
        for prompt in prompts:
            messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
            body = json.dumps({"model": "judge", "messages": messages, "temperature": 0}).encode()
            request = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                replies.append(Reply(json.loads(response.read())["choices"][0]["message"]["content"]))
        return replies

    return ask


def shim_vertexai() -> None:
    """ragas 0.4.3 imports ``ChatVertexAI`` from a module no langchain-community release has any more
    (ragas issues #2745, #2995): stand in a placeholder class when it is missing. Vertex is never used."""
    name = "langchain_community.chat_models.vertexai"
    if name not in sys.modules and importlib.util.find_spec(name) is None:
        module = types.ModuleType(name)
        module.ChatVertexAI = type("ChatVertexAI", (), {})  # type: ignore[attr-defined]
        sys.modules[name] = module


async def ragas_scores(url: str, model_path: str, samples: Sequence[Answer] = SAMPLES) -> dict[str, list[float]]:
    shim_vertexai()
    from openai import AsyncOpenAI
    from ragas.embeddings import HuggingFaceEmbeddings
    from ragas.llms import llm_factory
    from ragas.metrics.collections import (
        AnswerRelevancy,
        ContextPrecisionWithReference,
        ContextRecall,
        FactualCorrectness,
        Faithfulness,
    )

    llm = llm_factory("judge", client=AsyncOpenAI(base_url=url, api_key="sk-test-parity"))
    embeddings = HuggingFaceEmbeddings(model=model_path, device="cpu")
    metrics = {
        "faithfulness": Faithfulness(llm=llm),
        "answer_relevancy": AnswerRelevancy(llm=llm, embeddings=embeddings),
        "llm_context_precision_with_reference": ContextPrecisionWithReference(llm=llm),
        "context_recall": ContextRecall(llm=llm),
        "factual_correctness": FactualCorrectness(llm=llm),
    }
    scores: dict[str, list[float]] = {name: [] for name in metrics}
    for s in samples:
        contexts = [c.text for c in s.contexts]
        results = await asyncio.gather(
            metrics["faithfulness"].ascore(user_input=s.question, response=s.answer, retrieved_contexts=contexts),
            metrics["answer_relevancy"].ascore(user_input=s.question, response=s.answer),
            metrics["llm_context_precision_with_reference"].ascore(
                user_input=s.question, reference=s.reference, retrieved_contexts=contexts
            ),
            metrics["context_recall"].ascore(user_input=s.question, retrieved_contexts=contexts, reference=s.reference),
            metrics["factual_correctness"].ascore(response=s.answer, reference=s.reference),
        )
        for name, result in zip(metrics, results, strict=True):
            scores[name].append(float(result.value))
    return scores


def test_irflow_and_ragas_give_equal_scores_per_sample(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGAS_DO_NOT_TRACK", "true")
    log = tmp_path / "requests.jsonl"
    model = resolve_model("minilm")

    def embed(texts: Sequence[str]) -> np.ndarray:
        return encode(model, texts, prompt="", max_seq_length=None)

    with script_server(SERVICE, str(log)) as port:
        url = f"http://127.0.0.1:{port}/v1"
        ours = {metric: judge(metric, SAMPLES, http_ask(url), embed) for metric in LLM_METRICS}
        theirs = asyncio.run(ragas_scores(url, str(model.path)))
    for metric in LLM_METRICS:
        assert all(j.error is None for j in ours[metric]), (metric, [j.error for j in ours[metric]])
        values = [j.value for j in ours[metric]]
        assert values == pytest.approx(theirs[metric], abs=1e-6), metric
    sides = [json.loads(line)["side"] for line in log.read_text().splitlines()]
    assert {"ragas", "irflow"} == set(sides)
    # the samples exercise the metrics' range: neither side can agree by scoring everything alike
    for metric in LLM_METRICS:
        assert len({round(v, 6) for v in theirs[metric]}) >= 2, metric
    assert theirs["answer_relevancy"][2] == 0.0 and theirs["answer_relevancy"][1] > 0  # all vs some noncommittal


def test_the_edges_score_as_ragas_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty generated question is dropped (answer_relevancy: the mean of the others; none left: 0), and a
    text without claims counts no claim in factual_correctness (a score, not a failure), as in ragas 0.4.3."""
    monkeypatch.setenv("RAGAS_DO_NOT_TRACK", "true")
    model = resolve_model("minilm")

    def embed(texts: Sequence[str]) -> np.ndarray:
        return encode(model, texts, prompt="", max_seq_length=None)

    with script_server(SERVICE, str(tmp_path / "requests.jsonl")) as port:
        url = f"http://127.0.0.1:{port}/v1"
        ours = {metric: judge(metric, EDGES, http_ask(url), embed) for metric in LLM_METRICS}
        theirs = asyncio.run(ragas_scores(url, str(model.path), EDGES))
    for metric in LLM_METRICS:
        assert all(j.error is None for j in ours[metric]), (metric, [j.error for j in ours[metric]])
        assert [j.value for j in ours[metric]] == pytest.approx(theirs[metric], abs=1e-6), metric
    relevancy = ours["answer_relevancy"]
    assert relevancy[0].value == 0.0 and relevancy[0].detail["dropped_empty"] == 3  # no question left
    assert relevancy[1].value > 0 and relevancy[1].detail["dropped_empty"] == 1
    assert len(relevancy[1].detail["questions"]) == 2
    factual = ours["factual_correctness"]
    assert factual[0].value == 0.0 and factual[0].detail["answer_claims"] == []  # no claims in the answer
    assert factual[1].detail["reference_claims"] == [] and factual[1].value == theirs["factual_correctness"][1]
