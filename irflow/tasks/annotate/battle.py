"""What every judge shares: a battle, a verdict, the Judge protocol, and the versioned prompt.

A judge scores a battle ``(query, A, B)`` in [−1, 1]: negative = A is more relevant, positive
= B, 0 = a tie. A failed call or an answer that does not parse is a *missing* vote
(``Verdict.score is None`` with the reason in ``error``), never a silent 0. Judges see
documents in the order they are given; the runner swaps A and B at random and undoes the swap.
The prompt is versioned (``PROMPT_VERSION``, ``PROMPT_SHA256``) so a resumed run never mixes prompts.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from irflow.tasks.core.schema import IrflowError
from irflow.tasks.llm import DEFAULT_MAX_CHARS

PROMPT_VERSION = "pairwise-v1"
SYSTEM_PROMPT = """\
You are an expert relevance assessor for a search engine. You are given a search query and two \
candidate documents, A and B. Decide which document better satisfies the information need behind \
the query: the one a person who typed the query would rather read. Judge relevance only, not \
length, style or the order the documents are shown in. A document that shares words with the query \
but does not answer it is not relevant.

Answer with one JSON object and nothing else:
{"reasoning": "<one to three sentences>", "score": <a number from -1 to 1>}

score: -1 = A is clearly more relevant, 1 = B is clearly more relevant, 0 = equally relevant \
(or equally irrelevant); values in between express weaker preferences."""
USER_TEMPLATE = """\
Query:
{query}

Document A:
{doc_a}

Document B:
{doc_b}

Which document is more relevant to the query? Answer with the JSON object only."""
PROMPT_SHA256 = hashlib.sha256((SYSTEM_PROMPT + "\0" + USER_TEMPLATE).encode()).hexdigest()
ANSWER_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reasoning", "score"],
    "properties": {"reasoning": {"type": "string"}, "score": {"type": "number", "minimum": -1, "maximum": 1}},
}

OUTPUT_TOKENS = 120  # expected answer length, for cost estimates


class JudgesFailedError(IrflowError):
    """A judge has no valid vote at all: grades from it would be noise, so none are written."""


@dataclass(frozen=True)
class Battle:
    """What a judge sees: a query and two documents, in the order shown."""

    query_id: str
    query: str
    doc_a_id: str
    doc_a: str
    doc_b_id: str
    doc_b: str


@dataclass(frozen=True)
class Verdict:
    """A judge's answer in the order shown: ``score`` in [−1, 1], or None = missing (``error`` says why)."""

    score: float | None
    reasoning: str = ""
    error: str | None = None
    attempts: int = 1


@runtime_checkable
class Judge(Protocol):
    """Anything that scores battles. ``name`` is unique in an ensemble; calls to one ``provider``
    share a semaphore of ``concurrency``; ``version`` changes whenever the same battle could get
    another answer (prompt, scale), so a resumed run never mixes versions."""

    name: str
    provider: str
    concurrency: int
    price_per_1k: float
    local: bool

    @property
    def version(self) -> str:
        """Changes whenever the same battle could get another answer (prompt, scale)."""
        ...

    def prepare(self) -> None:
        """Get ready to judge (load scores, import an SDK, find the key); an IrflowError if it cannot
        (:class:`~irflow.tasks.llm.LLMSetupError` for an LLM)."""

    async def judge(self, battle: Battle) -> Verdict: ...

    def describe(self) -> dict[str, Any]: ...


class Answer(BaseModel):
    """The structured answer every LLM judge is asked for."""

    model_config = ConfigDict(extra="ignore")
    reasoning: str = ""
    score: float = Field(ge=-1.0, le=1.0, allow_inf_nan=False)


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


def parse_answer(text: str) -> Answer:
    """The JSON answer in ``text`` (code fences and prose around the object tolerated); ValueError if none."""
    text = _FENCE.sub("", (text or "").strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"no JSON object in answer {text[:120]!r}")
    try:
        return Answer.model_validate(json.loads(text[start : end + 1]))
    except (json.JSONDecodeError, ValidationError) as err:
        raise ValueError(f"malformed answer {text[:120]!r}: {str(err).splitlines()[0]}") from None


def render_prompt(battle: Battle, max_chars: int = DEFAULT_MAX_CHARS) -> tuple[str, str]:
    """``(system, user)`` messages of the versioned prompt; each document cut to ``max_chars``."""

    def cut(text: str) -> str:
        return text if len(text) <= max_chars else text[:max_chars] + " [...]"

    return SYSTEM_PROMPT, USER_TEMPLATE.format(query=battle.query, doc_a=cut(battle.doc_a), doc_b=cut(battle.doc_b))
