"""The LLM side of query synthesis: the generator (a client of :mod:`irflow.tasks.llm` asked for queries),
its answer cache and the cost estimate; the cached, concurrent calls are :mod:`irflow.tasks.llm.calls`'.

The generator is made from the LLM spec grammar (``openai:MODEL[@BASE_URL]``, ``anthropic:MODEL``,
``gemini:MODEL`` with their options), so retries, ``Retry-After``, ``rpm``/``tpm`` limits, reasoning-model
parameters, key handling and redaction are those of :mod:`irflow.tasks.core.http_client` and the clients.
Every answer is appended to a cache as it arrives (keyed by the generator's identity and the whole
prompt), so an interrupted or repeated synthesis pays for no call twice. Keys are never written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from irflow.tasks import llm
from irflow.tasks.core.config import cache_dir
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.llm import LLMClient, estimate_tokens, make_llm

QUERIES_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["queries"],
    "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
}
OUTPUT_TOKENS_PER_QUERY = 20  # expected answer length per query, for estimates


class GenerationFailedError(IrflowError):
    """No call of the synthesis got an answer: there is nothing to build a dataset from."""


@dataclass(frozen=True)
class Request:
    """One call: a document, a style, how many queries, and the prompt that asks for them."""

    doc_id: str
    style: str
    n: int
    system: str
    user: str
    key: str  # content key of the answer: generator identity + prompt


def make_generator(spec: str, price_per_1k: float | None = None) -> LLMClient:
    """The LLM a ``--llm`` spec names, asked for JSON ``{"queries": [...]}``. Nothing is called yet."""
    schema = ("synthetic_queries", QUERIES_SCHEMA)
    return make_llm(spec, "--llm", "query generator", price_per_1k=price_per_1k, answer_schema=schema)


class AnswerCache(llm.AnswerCache):
    """The synthesis answer cache (:class:`irflow.tasks.llm.AnswerCache`), by default in the
    cache folder's ``synthesize/answers.jsonl``."""

    def __init__(self, path: Path | None = None) -> None:
        super().__init__(path or cache_dir() / "synthesize" / "answers.jsonl")


def estimate(requests: list[Request], generator: LLMClient, cached: set[str]) -> dict[str, Any]:
    """Calls, tokens (about 4 characters a token, plus the expected answers) and USD of the requests
    whose answers are not cached; ``price_per_1k`` is the generator's (a placeholder unless set)."""
    todo = [r for r in requests if r.key not in cached]
    tokens = sum(estimate_tokens(len(r.system) + len(r.user)) + OUTPUT_TOKENS_PER_QUERY * r.n for r in todo)
    return {
        "calls": len(todo),
        "cached_calls": len(requests) - len(todo),
        "tokens": int(tokens),
        "usd": round(tokens / 1000 * generator.price_per_1k, 6),
        "price_per_1k": generator.price_per_1k,
        "model": generator.name,
    }


def calls_for(queries: int, per_call: int, overgenerate: float) -> int:
    """Calls that ask for ``overgenerate`` times the wanted queries, ``per_call`` at a time."""
    return max(1, math.ceil(queries * overgenerate / per_call))


__all__ = [
    "AnswerCache",
    "GenerationFailedError",
    "Request",
    "calls_for",
    "estimate",
    "make_generator",
]
