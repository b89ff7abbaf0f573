"""LLM clients: any OpenAI-compatible chat API, Anthropic's Messages API and Gemini's generateContent, each
spoken over httpx through :mod:`irflow.tasks.core.http_client` (no SDK).

Each asks any ``(system, user)`` prompt and returns the answer's text (:meth:`LLMClient.complete`); what a
caller asks (a pairwise relevance battle, a synthetic query, a RAG answer or a RAG judgement) is the
caller's. Every call retries on 429, 5xx and transport errors with ``Retry-After`` honoured, stops the run
on a refused key, keeps to ``rpm``/``tpm`` limits and reads its answer within ``IRFLOW_MAX_RESPONSE_BYTES``
and ``IRFLOW_RESPONSE_SECONDS``. API keys are read from the environment at call time and never logged,
stored or shown.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
from typing import Any
from urllib.parse import urlparse

from irflow.tasks.core.http_client import Call, HttpAuthError, HttpCallError, RateLimiter, RetryPolicy
from irflow.tasks.core.redact import redact, remember
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.core.urls import refuse_credentials
from irflow.tasks.llm.tokens import DEFAULT_PRICE_PER_1K

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
REASONING_MODELS = re.compile(r"^(o\d|gpt-5)")  # OpenAI models that think before answering
THINKING_MODELS = re.compile(r"^gemini-(2\.5|[3-9])")  # Gemini models that think unless told not to
DEFAULT_THINKING = 1024  # thinking tokens of a thinking model unless told (Anthropic's smallest budget)
DEFAULT_MAX_TOKENS = 400  # an answer: a few sentences, or a sentence of reasoning and a score
DEFAULT_MAX_CHARS = 6000  # characters of each document a caller shows the model
REASONING_MAX_TOKENS = 4000  # thinking tokens count against the completion budget


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


def _count(value: Any) -> int:
    """A token count as the provider gave it (0 when absent or not an integer)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _base_url(url: str | None, default: str, who: str, key_env: str) -> str:
    """``url`` (or ``default``) without its trailing slash, checked as an http(s) URL without credentials."""
    base = (url or default).rstrip("/")
    refuse_credentials(base, who, f"{key_env}, or the variable key_env=VARIABLE names")
    parsed = urlparse(base)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise LLMSetupError(f"{who}: bad base URL {base!r}: expected http(s)://host[:port][/path]")
    return base


class OpenAIClient(HttpLLMClient):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint."""

    kind = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        key_env: str = "OPENAI_API_KEY",
        response_format: str = "json_object",
        reasoning: str = "auto",
        **kwargs: Any,
    ) -> None:
        if reasoning not in ("auto", "yes", "no"):
            raise LLMSetupError(f"reasoning must be auto, yes or no, not {reasoning!r}")
        # Reasoning models (o1, o3, o4-mini, gpt-5...) refuse max_tokens and temperature=0, and spend
        # completion tokens on thinking: they get max_completion_tokens, a larger budget, no temperature.
        self.reasoning = REASONING_MODELS.match(model) is not None if reasoning == "auto" else reasoning == "yes"
        kwargs.setdefault("max_tokens", REASONING_MAX_TOKENS if self.reasoning else DEFAULT_MAX_TOKENS)
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL).rstrip("/")
        refuse_credentials(self.base_url, f"openai:{model}", f"{key_env}, or the variable key_env=VARIABLE names")
        parsed = urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise LLMSetupError(f"bad base URL {self.base_url!r}: expected http(s)://host[:port]/path")
        if response_format not in ("json_object", "json_schema", "none"):
            raise LLMSetupError(f"response_format must be json_object, json_schema or none, not {response_format!r}")
        default_name = f"openai:{model}" + ("" if self.base_url == OPENAI_BASE_URL else f"@{self.base_url}")
        kwargs.setdefault("name", default_name)
        super().__init__(model, provider=parsed.netloc, key_env=key_env, **kwargs)
        self.response_format = response_format
        self.answer_schema: tuple[str, dict[str, Any]] | None = None  # json_schema: (name, schema); None: json_object

    def _key_required(self) -> bool:
        return self.base_url == OPENAI_BASE_URL  # local servers usually need no key

    def prepare(self) -> None:
        self._key(required=self._key_required())

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "response_format": self.response_format}

    def _body(self, system: str, user: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            **(
                {"max_completion_tokens": self.max_tokens}
                if self.reasoning
                else {"temperature": 0, "max_tokens": self.max_tokens}
            ),
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        if self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        elif self.response_format == "json_schema" and self.answer_schema is None:
            body["response_format"] = {"type": "json_object"}  # the caller named no schema
        elif self.response_format == "json_schema" and self.answer_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": self.answer_schema[0], "strict": True, "schema": self.answer_schema[1]},
            }
        return body

    def _request(self, system: str, user: str, key: str | None) -> tuple[str, dict[str, Any], dict[str, str]]:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return f"{self.base_url}/chat/completions", self._body(system, user), headers

    def _answer(self, reply: Any) -> tuple[str, int, int]:
        counted = reply.get("usage") if isinstance(reply, dict) else None
        counted = counted if isinstance(counted, dict) else {}
        text = str(reply["choices"][0]["message"]["content"] or "")
        return text, _count(counted.get("prompt_tokens")), _count(counted.get("completion_tokens"))


ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com"
GEMINI_API_VERSION = "v1beta"


class AnthropicClient(HttpLLMClient):
    """Claude through Anthropic's Messages API (``POST {base_url}/v1/messages``)."""

    kind = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        key_env: str = "ANTHROPIC_API_KEY",
        concurrency: int = 4,
        base_url: str | None = None,
        thinking: int | str = "auto",
        **kwargs: Any,
    ) -> None:
        # Extended thinking: a budget of at least 1024 tokens inside max_tokens, and no temperature (the API
        # refuses one other than 1 while thinking). Claude thinks only when asked: "auto" is off.
        who = f"{kwargs.get('role', 'LLM')} {kwargs.get('name') or f'anthropic:{model}'}"
        self.thinking = _thinking_budget(thinking, None, who)
        if self.thinking is not None and self.thinking < 1024:
            raise LLMSetupError(f"{who}: thinking must be 0 (off) or at least 1024 tokens")
        if self.thinking is not None:
            kwargs.setdefault("max_tokens", self.thinking + DEFAULT_MAX_TOKENS)
            if int(kwargs["max_tokens"]) <= self.thinking:
                raise LLMSetupError(
                    f"{who}: max_tokens ({kwargs['max_tokens']}) must exceed the thinking budget "
                    f"({self.thinking}): thinking counts against it"
                )
        self.base_url = _base_url(base_url, ANTHROPIC_BASE_URL, who, key_env)
        super().__init__(model, provider="anthropic", key_env=key_env, concurrency=concurrency, **kwargs)

    def request(self, system: str, user: str) -> dict[str, Any]:
        """The JSON body of one prompt (recent models take no sampling temperature: the model's default)."""
        options: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }
        if self.thinking is not None:
            options["thinking"] = {"type": "enabled", "budget_tokens": self.thinking}
        return options

    def _request(self, system: str, user: str, key: str | None) -> tuple[str, dict[str, Any], dict[str, str]]:
        headers = {"x-api-key": key or "", "anthropic-version": ANTHROPIC_VERSION}
        return f"{self.base_url}/v1/messages", self.request(system, user), headers

    def _answer(self, reply: Any) -> tuple[str, int, int]:
        blocks = reply["content"]
        text = "".join(str(b.get("text") or "") for b in blocks if b.get("type", "text") == "text")
        counted = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        return text, _count(counted.get("input_tokens")), _count(counted.get("output_tokens"))


class GeminiClient(HttpLLMClient):
    """Gemini through the Gemini API's ``generateContent`` (JSON answers requested by MIME type)."""

    kind = "gemini"

    def __init__(
        self,
        model: str,
        *,
        key_env: str = "GEMINI_API_KEY",
        concurrency: int = 4,
        base_url: str | None = None,
        thinking: int | str = "auto",
        **kwargs: Any,
    ) -> None:
        # Gemini 2.5+ think by default and their thoughts count against max_output_tokens: a 400-token
        # budget would leave no room for the answer. "auto" gives thinking models a budget of 1024 tokens
        # on top of the answer's; 0 turns thinking off (where the model allows it).
        default = DEFAULT_THINKING if THINKING_MODELS.match(model) else None
        who = f"{kwargs.get('role', 'LLM')} {kwargs.get('name') or f'gemini:{model}'}"
        self.thinking = _thinking_budget(thinking, default, who, allow_zero=True)
        if self.thinking:
            kwargs.setdefault("max_tokens", self.thinking + DEFAULT_MAX_TOKENS)
        self.base_url = _base_url(base_url, GEMINI_BASE_URL, who, key_env)
        super().__init__(model, provider="gemini", key_env=key_env, concurrency=concurrency, **kwargs)

    def config_options(self, system: str) -> dict[str, Any]:
        """The generation options of one prompt (snake case; :meth:`request` sends them as the API spells them)."""
        options: dict[str, Any] = {
            "system_instruction": system,
            "temperature": 0,
            "max_output_tokens": self.max_tokens,
            "response_mime_type": "application/json",
        }
        if self.thinking is not None:
            options["thinking_config"] = {"thinking_budget": self.thinking}
        return options

    def request(self, system: str, user: str) -> dict[str, Any]:
        """The JSON body of one prompt."""
        options = self.config_options(system)
        config: dict[str, Any] = {
            "temperature": options["temperature"],
            "maxOutputTokens": options["max_output_tokens"],
            "responseMimeType": options["response_mime_type"],
        }
        if "thinking_config" in options:
            config["thinkingConfig"] = {"thinkingBudget": options["thinking_config"]["thinking_budget"]}
        return {
            "systemInstruction": {"parts": [{"text": system}]},
            "contents": [{"role": "user", "parts": [{"text": user}]}],
            "generationConfig": config,
        }

    def _request(self, system: str, user: str, key: str | None) -> tuple[str, dict[str, Any], dict[str, str]]:
        url = f"{self.base_url}/{GEMINI_API_VERSION}/models/{self.model}:generateContent"
        return url, self.request(system, user), {"x-goog-api-key": key or ""}

    def _answer(self, reply: Any) -> tuple[str, int, int]:
        counted = reply.get("usageMetadata") if isinstance(reply.get("usageMetadata"), dict) else {}
        if not reply.get("candidates"):  # a refused prompt: no candidate, the reason in promptFeedback
            raise KeyError("candidates")
        parts = reply["candidates"][0].get("content", {}).get("parts") or []
        text = "".join(str(p.get("text") or "") for p in parts if not p.get("thought"))  # thoughts are not the answer
        return text, _count(counted.get("promptTokenCount")), _count(counted.get("candidatesTokenCount"))


def _thinking_budget(value: int | str, default: int | None, who: str, *, allow_zero: bool = False) -> int | None:
    """A ``thinking`` option as tokens: ``auto`` = ``default``; 0 = off (None, or 0 where the API takes 0 as off)."""
    if value == "auto":
        return default
    try:
        tokens = int(value)
    except (TypeError, ValueError):
        tokens = -1
    if tokens < 0:
        raise LLMSetupError(f"{who}: thinking must be auto or a number of tokens (0 = off), not {value!r}")
    if tokens == 0:
        return 0 if allow_zero else None
    return tokens
