"""Generators: an answer from a question and its contexts.

Specs (``--generator``):

* ``extractive`` — no LLM: the leading sentence of each of the first :data:`EXTRACTIVE_CONTEXTS` contexts.
  An honest baseline (what retrieval alone puts in front of a reader) and what the demo runs offline.
* ``python:MODULE:CALLABLE`` — ``generate(query, contexts) -> str`` (``contexts``: the passages' texts in
  order); an exception fails that answer only, naming it.
* an LLM spec (:mod:`irflow.tasks.llm`'s grammar) — ``openai(OPTIONS):MODEL[@BASE_URL]`` (any OpenAI-compatible chat
  endpoint; the LLM options: ``key_env``, ``rpm``, ``tpm``, ``price``, ``max_tokens``, ...),
  ``anthropic:MODEL``, ``gemini:MODEL`` — asked the versioned prompt below through the cached
  :class:`~irflow.tasks.rag.llm.CachedAsk`.

The prompt (:data:`SYSTEM_PROMPT`, :data:`USER_TEMPLATE`) is versioned (:data:`PROMPT_VERSION`); its
SHA-256 is part of a configuration's identity, and the whole rendered prompt is part of each call's cache key.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError, IrflowError
from irflow.tasks.core.urls import CredentialsInUrlError
from irflow.tasks.llm import parse_llm
from irflow.tasks.rag.samples import Ask, Context, Prompt, Reply
from irflow.tasks.retrieve.python_system import import_callable

PROMPT_VERSION = "rag-answer-v1"
SYSTEM_PROMPT = (
    "You answer questions about technical documentation. Use only the numbered contexts you are given. "
    "Answer in at most four sentences. If the contexts do not contain the answer, say that you do not know."
)
USER_TEMPLATE = "Question: {question}\n\nContexts:\n{contexts}\n\nAnswer:"
PROMPT_SHA256 = hashlib.sha256((PROMPT_VERSION + SYSTEM_PROMPT + USER_TEMPLATE).encode()).hexdigest()
MAX_CONTEXT_CHARS = 2000  # of each context in the prompt
EXTRACTIVE_CONTEXTS = 3
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def render_prompt(question: str, contexts: Sequence[Context]) -> Prompt:
    """The generation prompt: the question and the numbered contexts (each cut to :data:`MAX_CONTEXT_CHARS`)."""
    numbered = "\n\n".join(f"[{i}] {c.text[:MAX_CONTEXT_CHARS]}" for i, c in enumerate(contexts, 1))
    return Prompt(SYSTEM_PROMPT, USER_TEMPLATE.format(question=question, contexts=numbered or "(none)"))


def leading_sentence(text: str) -> str:
    """A passage's first sentence (or first line), the title left out when the passage has one, and a line
    that only introduces what follows (a forum post's "someone asked:") skipped."""
    body = text.split("\n\n", 1)[1] if "\n\n" in text else text
    for piece in _SENTENCE.split(body.strip()):
        if piece.strip() and not piece.rstrip().endswith(":"):
            return piece.strip()
    return ""


def extractive(contexts: Sequence[Context]) -> str:
    """The leading sentences of the first :data:`EXTRACTIVE_CONTEXTS` contexts, in order."""
    return " ".join(s for c in contexts[:EXTRACTIVE_CONTEXTS] if (s := leading_sentence(c.text)))


@dataclass(frozen=True)
class Generator:
    """A parsed generator spec: ``kind`` (extractive, python, llm) and its target."""

    spec: str
    kind: str
    target: str = ""

    def describe(self) -> dict[str, Any]:
        """The generator's identity, recorded with every configuration."""
        out: dict[str, Any] = {"spec": self.spec, "kind": self.kind}
        if self.kind == "llm":
            out |= {"prompt_version": PROMPT_VERSION, "prompt_sha256": PROMPT_SHA256}
        return out


def parse_generator(spec: str) -> Generator:
    """A ``--generator`` spec, checked (an LLM spec by :func:`irflow.tasks.llm.parse_llm`) before any work."""
    spec = str(spec).strip()
    if spec == "extractive":
        return Generator(spec, "extractive")
    if spec.startswith("python:"):
        target = spec.removeprefix("python:")
        module, _, name = target.partition(":")
        if not module or not name:
            raise InputError(f"--generator: expected python:MODULE:CALLABLE, got {spec!r}")
        return Generator(spec, "python", target)
    try:
        parse_llm(spec, "--generator")
    except CredentialsInUrlError:
        raise
    except InputError as err:
        raise InputError(
            f"--generator: expected extractive, python:MODULE:CALLABLE or an LLM spec such as "
            f"openai(OPTIONS):MODEL[@BASE_URL]; {err}"
        ) from None
    return Generator(spec, "llm", spec)


class GenerationFailedError(IrflowError):
    """Every generation of a configuration failed: there are no answers to score."""


def check_replies(generator: Generator, config: str, replies: Sequence[Reply]) -> None:
    """GenerationFailedError when no reply of ``config`` holds an answer (every call failed), naming the
    generator, the count and the first error: such a run has nothing to evaluate, and must not look like one."""
    if replies and all(r.text is None for r in replies):
        first = next((r.error for r in replies if r.error), "no answer")
        raise GenerationFailedError(
            redact(
                f"--generator {generator.spec}: every generation failed ({len(replies)} of {len(replies)} questions "
                f"of {config}); first error: {first}. Nothing was scored: check the generator and run again"
            )
        )


def load_callable(target: str) -> Callable[[str, list[str]], Any]:
    """``MODULE:CALLABLE`` imported; InputError naming what is missing."""
    return import_callable(target, "generate(query, contexts) -> str", where="--generator: ")


def generate(
    generator: Generator, items: Sequence[tuple[str, Sequence[Context]]], ask: Ask | None = None
) -> list[Reply]:
    """One answer (or the reason there is none) per ``(question, contexts)``; an LLM generator needs ``ask``."""
    if generator.kind == "extractive":
        return [Reply(extractive(contexts)) for _, contexts in items]
    if generator.kind == "python":
        fn = load_callable(generator.target)
        replies = []
        for question, contexts in items:
            try:
                text = fn(question, [c.text for c in contexts])
            except Exception as exc:  # the plugin's failure is that answer's, named
                replies.append(Reply(None, f"{type(exc).__name__}: {exc}"))
                continue
            ok = isinstance(text, str)
            replies.append(
                Reply(text, None) if ok else Reply(None, f"generate returned {type(text).__name__}, not str")
            )
        return replies
    if ask is None:
        raise InputError(f"the generator {generator.spec} needs an LLM client")
    return ask([render_prompt(q, c) for q, c in items])
