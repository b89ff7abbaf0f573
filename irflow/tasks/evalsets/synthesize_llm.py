"""The LLM side of query synthesis: the generator (an annotate LLM judge's client asked another prompt),
the answer cache, the cost estimate and the concurrent calls.

The generator is made from the judge spec grammar (``openai:MODEL[@BASE_URL]``, ``anthropic:MODEL``,
``gemini:MODEL`` with their options), so retries, ``Retry-After``, ``rpm``/``tpm`` limits, reasoning-model
parameters, key handling and redaction are those of :mod:`irflow.tasks.core.http_client` and the judges.
Every answer is appended to a cache as it arrives (keyed by the generator's identity and the whole
prompt), so an interrupted or repeated synthesis pays for no call twice. Keys are never written.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from irflow.tasks.annotate.battle import JudgeAuthError, JudgeCallError, JudgeSetupError, estimate_tokens
from irflow.tasks.annotate.judges import make_judge, parse_judge
from irflow.tasks.annotate.llm_judges import OpenAIJudge, PromptJudge
from irflow.tasks.core.atomic import file_lock
from irflow.tasks.core.config import cache_dir
from irflow.tasks.core.progress import Progress
from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError, IrflowError

LLM_KINDS = ("openai", "anthropic", "gemini")
QUERIES_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["queries"],
    "properties": {"queries": {"type": "array", "items": {"type": "string"}}},
}
OUTPUT_TOKENS_PER_QUERY = 20  # expected answer length per query, for estimates


class GeneratorAuthError(IrflowError):
    """The LLM provider refused the key (HTTP 401/403): synthesis stops at once and stores nothing."""


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


@dataclass(frozen=True)
class Outcome:
    """A call's answer text (None when the call failed for good, ``error`` says why)."""

    text: str | None
    error: str | None = None
    cached: bool = False


def make_generator(spec: str, price_per_1k: float | None = None) -> PromptJudge:
    """The LLM a spec names (annotate's judge grammar, LLM kinds only). Nothing is called yet."""
    parsed = parse_judge(spec)
    if parsed.kind not in LLM_KINDS:
        raise InputError(f"--llm takes an LLM spec ({', '.join(k + ':MODEL' for k in LLM_KINDS)}), not {spec!r}")
    generator = make_judge(parsed, price_per_1k=price_per_1k)
    assert isinstance(generator, PromptJudge)
    generator.role = "query generator"
    if isinstance(generator, OpenAIJudge):
        generator.answer_schema = ("synthetic_queries", QUERIES_SCHEMA)
    return generator


def request_key(generator: PromptJudge, system: str, user: str) -> str:
    """The answer's cache key: the generator's version (model, endpoint, answer options) and the prompt."""
    text = "\0".join((generator.version, system, user))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class AnswerCache:
    """Answers as JSON lines ``{"key", "text"}``, appended (under a lock) as each call returns; a torn last
    line from a killed run is skipped. Holds answer texts only, never a key or a header."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_dir() / "synthesize" / "answers.jsonl"

    def load(self) -> dict[str, str]:
        if not self.path.exists():
            return {}
        answers = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                answers[str(row["key"])] = str(row["text"])
            except (ValueError, KeyError, TypeError):
                continue
        return answers

    def append(self, key: str, text: str) -> None:
        """Store an answer, secrets in it (an answer may echo the API key) as ``***``."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(self.path.with_suffix(".lock")), self.path.open("a", encoding="utf-8") as out:
            # escaped: an answer holding a lone surrogate is kept as the model sent it (collect drops the query)
            out.write(json.dumps({"key": key, "text": redact(text)}) + "\n")
            out.flush()


def estimate(requests: list[Request], generator: PromptJudge, cached: set[str]) -> dict[str, Any]:
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


def ask_all(requests: list[Request], generator: PromptJudge, cache: AnswerCache) -> dict[str, Outcome]:
    """Every request's answer (cached ones from the cache), at most ``generator.concurrency`` in flight.
    A refused key stops everything at once (:class:`GeneratorAuthError`); answers already received stay
    in the cache."""
    stored = cache.load()
    outcomes = {r.key: Outcome(stored[r.key], cached=True) for r in requests if r.key in stored}
    todo = list({r.key: r for r in requests if r.key not in stored}.values())
    if todo:
        try:
            generator.prepare()
        except JudgeSetupError as err:
            raise InputError(str(err)) from None
        outcomes |= asyncio.run(_ask(todo, generator, cache))
    return outcomes


async def _ask(todo: list[Request], generator: PromptJudge, cache: AnswerCache) -> dict[str, Outcome]:
    gate = asyncio.Semaphore(max(1, generator.concurrency))
    refused = asyncio.Event()
    progress = Progress("synthesize", len(todo), unit="calls")  # rate and ETA on a terminal only

    async def one(request: Request) -> tuple[str, Outcome]:
        async with gate:
            if refused.is_set():
                return request.key, Outcome(None, "not asked: the key was refused")
            try:
                text, _ = await generator.complete(request.system, request.user)
            except JudgeCallError as err:
                return request.key, Outcome(None, str(err))
            except JudgeAuthError:
                refused.set()
                raise
            finally:
                progress.advance(1)
            text = redact(text)  # what is stored is what is used: an answer that echoes the key shows ***
            cache.append(request.key, text)
            return request.key, Outcome(text)

    tasks = [asyncio.create_task(one(r)) for r in todo]
    try:
        return dict(await asyncio.gather(*tasks))
    except JudgeAuthError as err:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise GeneratorAuthError(str(err)) from None
    finally:
        progress.close()
        await generator.aclose()


def calls_for(queries: int, per_call: int, overgenerate: float) -> int:
    """Calls that ask for ``overgenerate`` times the wanted queries, ``per_call`` at a time."""
    return max(1, math.ceil(queries * overgenerate / per_call))
