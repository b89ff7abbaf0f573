"""Cached, concurrent calls of any prompt to an LLM client of :mod:`~irflow.tasks.llm.clients`.

Shared by every step that asks an LLM something other than the pairwise battle (query synthesis, RAG
answer generation and judging): each call is keyed by the client's identity (model, endpoint, answer
options) and the whole prompt, and its answer is appended to a JSON-lines cache as it arrives, so an
interrupted or repeated run pays for no call twice. Retries, rate limits and key handling are the
client's (:mod:`irflow.tasks.core.http_client`). Keys are never written.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from irflow.tasks.core.atomic import file_lock
from irflow.tasks.core.progress import Progress
from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError, IrflowError
from irflow.tasks.llm.clients import LLMAuthError, LLMCallError, LLMClient, LLMSetupError


class GeneratorAuthError(IrflowError):
    """The LLM provider refused the key (HTTP 401/403): the calls stop at once."""


class Asked(Protocol):
    """One call to make: its cache key and its prompt."""

    @property
    def key(self) -> str: ...
    @property
    def system(self) -> str: ...
    @property
    def user(self) -> str: ...


@dataclass(frozen=True)
class Outcome:
    """A call's answer text (None when the call failed for good, ``error`` says why)."""

    text: str | None
    error: str | None = None
    cached: bool = False


def request_key(generator: LLMClient, system: str, user: str, salt: str = "") -> str:
    """The answer's cache key: the client's version (model, endpoint, answer options), the prompt and
    ``salt`` (e.g. a repeat number, so a repeat is a call of its own)."""
    text = "\0".join((generator.version, system, user, *((salt,) if salt else ())))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class AnswerCache:
    """Answers as JSON lines ``{"key", "text"}``, appended (under a lock) as each call returns; a torn last
    line from a killed run is skipped. Holds answer texts only, never a key or a header."""

    def __init__(self, path: Path) -> None:
        self.path = path

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
            # escaped: an answer holding a lone surrogate is kept as the model sent it
            out.write(json.dumps({"key": key, "text": redact(text)}) + "\n")
            out.flush()


def ask_all(
    requests: Sequence[Asked], generator: LLMClient, cache: AnswerCache, what: str = "LLM calls"
) -> dict[str, Outcome]:
    """Every request's answer (cached ones from the cache), at most ``generator.concurrency`` in flight,
    with progress (calls/s, ETA) named ``what`` on a terminal. A refused key stops everything at once
    (:class:`GeneratorAuthError`); answers already received stay in the cache."""
    stored = cache.load()
    outcomes = {r.key: Outcome(stored[r.key], cached=True) for r in requests if r.key in stored}
    todo = list({r.key: r for r in requests if r.key not in stored}.values())
    if todo:
        try:
            generator.prepare()
        except LLMSetupError as err:
            raise InputError(str(err)) from None
        outcomes |= asyncio.run(_ask(todo, generator, cache, what))
    return outcomes


async def _ask(todo: list[Asked], generator: LLMClient, cache: AnswerCache, what: str) -> dict[str, Outcome]:
    gate = asyncio.Semaphore(max(1, generator.concurrency))
    refused = asyncio.Event()
    progress = Progress(what, len(todo), unit="calls")  # rate and ETA on a terminal only

    async def one(request: Asked) -> tuple[str, Outcome]:
        async with gate:
            if refused.is_set():
                return request.key, Outcome(None, "not asked: the key was refused")
            try:
                text, _ = await generator.complete(request.system, request.user)
            except LLMCallError as err:
                return request.key, Outcome(None, str(err))
            except LLMAuthError:
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
    except LLMAuthError as err:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise GeneratorAuthError(str(err)) from None
    finally:
        progress.close()
        await generator.aclose()
