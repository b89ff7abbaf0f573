"""LLM judges: any client of :mod:`irflow.tasks.llm` asked the versioned pairwise prompt.

An :class:`LLMJudge` renders :mod:`~irflow.tasks.annotate.battle`'s prompt (each document cut to
the client's ``max_chars``), asks the client, parses the JSON answer and asks once more with a reminder of the format
when it does not parse. Retries, rate limits and key handling are the client's.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from irflow.tasks.annotate.battle import (
    ANSWER_SCHEMA,
    PROMPT_SHA256,
    PROMPT_VERSION,
    Battle,
    Verdict,
    parse_answer,
    render_prompt,
)
from irflow.tasks.llm import LLMCallError, LLMClient, OpenAIClient

REASK = '\n\nAnswer with the JSON object only: {"reasoning": "...", "score": <number from -1 to 1>}.'


class LLMJudge:
    """A :class:`~irflow.tasks.annotate.battle.Judge` asking an LLM ``client`` the pairwise prompt."""

    local = False

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.max_chars = client.max_chars
        self.name, self.provider = client.name, client.provider
        self.concurrency, self.price_per_1k = client.concurrency, client.price_per_1k
        if isinstance(client, OpenAIClient):
            client.answer_schema = ("pairwise_relevance", ANSWER_SCHEMA)  # response_format=json_schema

    @property
    def version(self) -> str:
        """The prompt version and a digest of everything else that can change an answer (the client's
        identity and ``max_chars``): a rerun with another model or ``max_chars`` into the same output asks
        again instead of reusing the old model's votes."""
        digest = hashlib.sha256(json.dumps(self.client.identity(), sort_keys=True).encode()).hexdigest()[:12]
        return f"{PROMPT_VERSION}-{digest}"

    def prepare(self) -> None:
        self.client.prepare()

    async def judge(self, battle: Battle) -> Verdict:
        """Ask once; an answer that does not parse is asked again once, with a reminder of the format."""
        system, user = render_prompt(battle, self.max_chars)
        attempts = 0
        for prompt in (user, user + REASK):
            try:
                text, tries = await self.client.complete(system, prompt)
            except LLMCallError as err:
                return Verdict(None, error=str(err), attempts=attempts + err.attempts)
            attempts += tries
            try:
                answer = parse_answer(text)
            except ValueError as err:
                error = str(err)
                continue
            return Verdict(float(answer.score), answer.reasoning, None, attempts)
        return Verdict(None, error=f"{error} (also when asked again)", attempts=attempts)

    def describe(self) -> dict[str, Any]:
        return self.client.describe() | {"version": self.version, "prompt_sha256": PROMPT_SHA256}

    async def aclose(self) -> None:
        await self.client.aclose()
