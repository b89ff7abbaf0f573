"""The production :data:`~irflow.tasks.rag.samples.Ask`: every LLM call of a RAG evaluation (generation and
judging) cached by content, concurrent, counted.

A call's cache key is the client's identity (model, endpoint, answer options: ``LLMClient.version``),
the whole prompt and, for a judge repeat r > 0, ``repeat r``: a rerun of the same evaluation sends no
request and gives identical numbers, while ``--judge-repeats N`` asks each judging prompt N times for real
the first time (run-to-run noise). Clients, retries, rate limits, key handling and redaction are
:mod:`irflow.tasks.llm`'s (its ``make_llm`` makes the clients); answers are cached in ``<cache>/rag/answers.jsonl``.
Tokens are the provider's count where it sends one, else estimated at ~4 characters a token; USD is
tokens × the client's ``price`` (USD per 1k tokens; a placeholder unless set).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from irflow.tasks.core.config import cache_dir
from irflow.tasks.llm import AnswerCache, LLMClient, ask_all, estimate_tokens, request_key
from irflow.tasks.rag.samples import Prompt, Reply

EXPECTED_ANSWER_TOKENS = 150  # for the --dry-run estimate of an answer's length


def answer_cache(path: Path | None = None) -> AnswerCache:
    return AnswerCache(path or cache_dir() / "rag" / "answers.jsonl")


@dataclass
class Usage:
    """What one stage's calls cost: calls sent, answered from the cache, failed; tokens; USD."""

    calls: int = 0
    cached: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    tokens_counted_by: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["usd"] = round(self.usd, 6)
        out["tokens_counted_by"] = "+".join(sorted(self.tokens_counted_by)) or None
        return out


@dataclass(frozen=True)
class _Request:
    key: str
    system: str
    user: str


class CachedAsk:
    """An :data:`~irflow.tasks.rag.samples.Ask` over one chat client; ``repeat`` r > 0 keys the calls apart."""

    def __init__(self, client: LLMClient, cache: AnswerCache, usage: Usage | None = None, repeat: int = 0) -> None:
        self.client, self.cache, self.repeat = client, cache, repeat
        self.usage = usage if usage is not None else Usage()

    def again(self, repeat: int) -> CachedAsk:
        """The same client asked anew: repeat ``repeat`` (its own cache entries), counted in the same usage."""
        return CachedAsk(self.client, self.cache, self.usage, repeat)

    def _requests(self, prompts: Sequence[Prompt]) -> list[_Request]:
        salt = f"repeat {self.repeat}" if self.repeat else ""
        return [_Request(request_key(self.client, p.system, p.user, salt), p.system, p.user) for p in prompts]

    def __call__(self, prompts: Sequence[Prompt]) -> list[Reply]:
        requests = self._requests(prompts)
        counted = dict(self.client.usage)
        outcomes = ask_all(requests, self.client, self.cache, what=f"{self.client.role} {self.client.name}")
        fresh = {r.key: r for r in requests if not outcomes[r.key].cached}
        u = self.usage
        u.cached += len({r.key for r in requests}) - len(fresh)
        u.calls += len(fresh)
        u.failed += sum(outcomes[k].text is None for k in fresh)
        prompt_tokens = self.client.usage["prompt_tokens"] - counted["prompt_tokens"]
        completion_tokens = self.client.usage["completion_tokens"] - counted["completion_tokens"]
        if fresh and prompt_tokens + completion_tokens > 0:
            u.tokens_counted_by.add("provider")
        elif fresh:
            u.tokens_counted_by.add("estimate")
            prompt_tokens = sum(estimate_tokens(len(r.system) + len(r.user)) for r in fresh.values())
            completion_tokens = sum(estimate_tokens(len(outcomes[k].text or "")) for k in fresh)
        u.prompt_tokens += prompt_tokens
        u.completion_tokens += completion_tokens
        u.usd += (prompt_tokens + completion_tokens) / 1000 * self.client.price_per_1k
        return [Reply(outcomes[r.key].text, outcomes[r.key].error) for r in requests]

    def estimate(self, prompts: Sequence[Prompt]) -> dict[str, Any]:
        """The calls, tokens and USD ``prompts`` would cost now (cached answers are free); nothing is sent."""
        stored = set(self.cache.load())
        todo = {r.key: r for r in self._requests(prompts) if r.key not in stored}
        tokens = sum(estimate_tokens(len(r.system) + len(r.user)) + EXPECTED_ANSWER_TOKENS for r in todo.values())
        return {
            "calls": len(todo),
            "cached_calls": len(prompts) - len(todo),
            "tokens": int(tokens),
            "usd": round(tokens / 1000 * self.client.price_per_1k, 6),
            "price_per_1k": self.client.price_per_1k,
            "model": self.client.name,
        }


__all__ = ["EXPECTED_ANSWER_TOKENS", "CachedAsk", "Usage", "answer_cache"]
