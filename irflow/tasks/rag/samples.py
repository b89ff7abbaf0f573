"""What the answer stage works on: a question, the contexts a generator was given, its answer.

Shared by every step of RAG evaluation (reading answer files, generating, the id-based and the
LLM-judged metrics), so each speaks of the same thing. ``Ask`` is how a step reaches an LLM without
knowing about caching, rate limits or cost: it takes a batch of prompts and returns one reply each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class Context:
    """One passage given to the generator: a corpus document (``doc_id``, its text filled in from the
    corpus) and/or free text the pipeline retrieved elsewhere (``doc_id`` None)."""

    text: str
    doc_id: str | None = None


@dataclass(frozen=True)
class Answer:
    """One query's answer: the question, the contexts in the order the generator saw them, the answer and,
    when the dataset has one, a reference answer."""

    query_id: str
    question: str
    answer: str
    contexts: tuple[Context, ...]
    reference: str | None = None


class Prompt(NamedTuple):
    """One chat call: the system and the user message."""

    system: str
    user: str


class Reply(NamedTuple):
    """A call's answer text, or None with the reason the call failed for good."""

    text: str | None
    error: str | None = None


Ask = Callable[[Sequence[Prompt]], list[Reply]]
"""A batch of prompts in, one reply each out (same order); caching, concurrency and cost are the caller's."""
