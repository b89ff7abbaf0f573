"""What every LLM client shares (:class:`LLMClient`: identity, key handling, usage, the failure path) and the
client that speaks JSON over irflow's HTTP layer (:class:`HttpLLMClient`: retries, rate limits, bounded
answers), with the errors every caller tells apart: :class:`LLMSetupError` (before any call),
:class:`LLMCallError` (one call failed for good) and :class:`LLMAuthError` (the key refused: stop). The
providers' clients are in :mod:`irflow.tasks.llm.clients`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Any
from urllib.parse import urlparse

from irflow.tasks.core.http_client import Call, HttpAuthError, HttpCallError, RateLimiter, RetryPolicy
from irflow.tasks.core.redact import redact, remember
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.core.urls import refuse_credentials
from irflow.tasks.llm.tokens import DEFAULT_PRICE_PER_1K

DEFAULT_MAX_TOKENS = 400  # an answer: a few sentences, or a sentence of reasoning and a score
DEFAULT_MAX_CHARS = 6000  # characters of each document a caller shows the model


class LLMSetupError(IrflowError):
    """An LLM client cannot run: a missing SDK or API key, a bad option. Raised before any call is made."""


class LLMCallError(Exception):
    """One call failed for good (after its retries): its answer is missing."""

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


class LLMAuthError(LLMSetupError):
    """The provider refused the credentials (HTTP 401/403): every further call would fail too, so the
    caller stops at once."""


class LLMClient:
    """What every client shares: identity, key handling, usage, the failure path. Subclasses implement
    ``_complete``. ``role`` names the caller in messages (``judge``, ``query generator``, ``RAG judge``...);
    ``max_chars`` is how much of each document a caller shows the model (a judge's two, a synthesis's one)."""

    kind = "llm"

    def __init__(
        self,
        model: str,
        *,
        name: str | None = None,
        provider: str,
        role: str = "LLM",
        concurrency: int = 8,
        price_per_1k: float = DEFAULT_PRICE_PER_1K,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        max_chars: int = DEFAULT_MAX_CHARS,
        key_env: str = "",
    ) -> None:
        self.model = model
        self.name = name or f"{self.kind}:{model}"
        self.provider = provider
        self.role = role
        self.concurrency = int(concurrency)
        self.price_per_1k = float(price_per_1k)
        self.max_tokens = int(max_tokens)
        self.max_chars = int(max_chars)
        self.key_env = key_env
        self.usage = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}  # as the provider counted them

    def identity(self) -> dict[str, Any]:
        """Everything about the client that can change an answer (provider, model, endpoint, answer length,
        document length, answer format, reasoning or thinking budget), as plain data."""
        answers = {
            "kind": self.kind,
            "model": self.model,
            "provider": self.provider,
            "base_url": getattr(self, "base_url", None),
            "max_tokens": self.max_tokens,
            "max_chars": self.max_chars,
            "response_format": getattr(self, "response_format", None),
            "reasoning": getattr(self, "reasoning", None),
        }
        if getattr(self, "thinking", None) is not None:
            answers["thinking"] = self.thinking  # type: ignore[attr-defined]
        return answers

    @property
    def version(self) -> str:
        """A digest of :meth:`identity`: a cached answer is reused only by the same client."""
        return "llm-" + hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:12]

    def _key(self, required: bool = True) -> str | None:
        """The API key from ``key_env``, remembered for :func:`redact` (error bodies may echo request headers)."""
        key = os.environ.get(self.key_env) if self.key_env else None
        remember(key)
        if required and not key:
            raise LLMSetupError(f"{self.role} {self.name}: set the API key in the environment variable {self.key_env}")
        return key

    def prepare(self) -> None:
        """Get ready to call (import an SDK, find the key); LLMSetupError if it cannot."""
        self._key()

    async def _complete(self, system: str, user: str) -> tuple[str, int]:
        """The model's answer text and the number of attempts it took; LLMCallError on failure."""
        raise NotImplementedError

    async def complete(self, system: str, user: str) -> tuple[str, int]:
        """Ask any prompt: the answer text and the number of attempts; LLMCallError when the call failed for
        good, LLMAuthError when the key is refused."""
        return await self._complete(system, user)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "provider": self.provider,
            "version": self.version,
            "concurrency": self.concurrency,
            "key_env": self.key_env,
            "price_per_1k": self.price_per_1k,
        }

    async def aclose(self) -> None:
        return None


class HttpLLMClient(LLMClient):
    """A client that POSTs JSON through irflow's HTTP layer: retries, rate limits, bounded answers, one httpx
    client per event loop. Subclasses build the request (:meth:`_request`) and read the answer (:meth:`_answer`)."""

    def __init__(
        self,
        model: str,
        *,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        timeout: float = 120.0,
        rpm: float | None = None,
        tpm: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, **kwargs)
        self.max_retries, self.backoff, self.max_backoff = int(max_retries), float(backoff), float(max_backoff)
        self.timeout = float(timeout)
        try:  # requests and tokens per minute (the provider's limits for the key): waits instead of 429s
            self.limiter = RateLimiter(None if rpm is None else float(rpm), None if tpm is None else float(tpm))
        except ValueError as err:
            raise LLMSetupError(f"{self.role} {self.name}: {err}") from None
        self._client: Any = None
        self._loop: Any = None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "max_retries": self.max_retries, "rpm": self.limiter.rpm, "tpm": self.limiter.tpm}

    def _http(self) -> Any:
        import httpx

        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:  # a client belongs to one event loop
            self._client, self._loop = httpx.AsyncClient(timeout=self.timeout), loop
        return self._client

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client = self._loop = None

    def _request(self, system: str, user: str, key: str | None) -> tuple[str, dict[str, Any], dict[str, str]]:
        """``(url, JSON body, headers)`` of one prompt."""
        raise NotImplementedError

    def _answer(self, reply: Any) -> tuple[str, int, int]:
        """``(text, prompt tokens, completion tokens)`` of a decoded answer; KeyError, IndexError or TypeError
        when it is not shaped as expected."""
        raise NotImplementedError

    def _key_required(self) -> bool:
        return True

    async def _complete(self, system: str, user: str) -> tuple[str, int]:
        key = self._key(required=self._key_required())
        url, body, headers = self._request(system, user, key)
        policy = RetryPolicy(self.max_retries, self.backoff, self.max_backoff)
        hint = f"check {self.key_env}" if self.key_env else "check the API key"
        call = Call(url, f"{self.role} {self.name}", (key,) if key else (), policy, hint, self.limiter)
        tokens = (len(system) + len(user)) // 4 + self.max_tokens  # for the tokens-per-minute budget only
        try:
            reply = await call.apost(self._http(), body, tokens=tokens, headers=headers)
        except HttpAuthError as err:  # the key is refused: every other call would be refused too
            raise LLMAuthError(str(err)) from None
        except HttpCallError as err:
            raise LLMCallError(str(err), err.attempts) from None
        try:
            text, prompt, completion = self._answer(reply.json)
        except (KeyError, IndexError, TypeError, AttributeError):
            unexpected = redact(json.dumps(reply.json)[:200], (key,) if key else ())
            raise LLMCallError(f"{self.role} {self.name}: unexpected response {unexpected!r}", reply.attempts) from None
        self.usage["calls"] += 1
        self.usage["prompt_tokens"] += prompt
        self.usage["completion_tokens"] += completion
        return text, reply.attempts


def token_count(value: Any) -> int:
    """A token count as the provider gave it (0 when absent or not an integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def checked_base_url(url: str | None, default: str, who: str, key_env: str) -> str:
    """``url`` (or ``default``) without its trailing slash, checked as an http(s) URL without credentials."""
    base = (url or default).rstrip("/")
    refuse_credentials(base, who, f"{key_env}, or the variable key_env=VARIABLE names")
    parsed = urlparse(base)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise LLMSetupError(f"{who}: bad base URL {base!r}: expected http(s)://host[:port][/path]")
    return base


__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_TOKENS",
    "HttpLLMClient",
    "LLMAuthError",
    "LLMCallError",
    "LLMClient",
    "LLMSetupError",
    "checked_base_url",
    "token_count",
]
