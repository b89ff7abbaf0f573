"""LLM clients: any OpenAI-compatible chat API, Anthropic's Messages API and Gemini's generateContent, each
spoken over httpx through :mod:`irflow.tasks.core.http_client` (no SDK).

Each asks any ``(system, user)`` prompt and returns the answer's text (:meth:`LLMClient.complete`); what a
caller asks (a pairwise relevance battle, a synthetic query, a RAG answer or a RAG judgement) is the
caller's. Every call retries on 429, 5xx and transport errors with ``Retry-After`` honoured, stops the run
on a refused key, keeps to ``rpm``/``tpm`` limits and reads its answer within ``IRFLOW_MAX_RESPONSE_BYTES``
and ``IRFLOW_RESPONSE_SECONDS``. API keys are read from the environment at call time and never logged,
stored or shown.

The base classes and errors live in :mod:`irflow.tasks.llm.client_base` and are re-exported here.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import urlparse

from irflow.tasks.core.urls import refuse_credentials
from irflow.tasks.llm.client_base import (
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_TOKENS,
    HttpLLMClient,
    LLMAuthError,
    LLMCallError,
    LLMClient,
    LLMSetupError,
    checked_base_url,
    token_count,
)

OPENAI_BASE_URL = "https://api.openai.com/v1"
REASONING_MODELS = re.compile(r"^(o\d|gpt-5)")  # OpenAI models that think before answering
THINKING_MODELS = re.compile(r"^gemini-(2\.5|[3-9])")  # Gemini models that think unless told not to
DEFAULT_THINKING = 1024  # thinking tokens of a thinking model unless told (Anthropic's smallest budget)
REASONING_MAX_TOKENS = 4000  # thinking tokens count against the completion budget


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
        return text, token_count(counted.get("prompt_tokens")), token_count(counted.get("completion_tokens"))


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
        self.base_url = checked_base_url(base_url, ANTHROPIC_BASE_URL, who, key_env)
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
        return text, token_count(counted.get("input_tokens")), token_count(counted.get("output_tokens"))


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
        self.base_url = checked_base_url(base_url, GEMINI_BASE_URL, who, key_env)
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
        return text, token_count(counted.get("promptTokenCount")), token_count(counted.get("candidatesTokenCount"))


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


__all__ = [
    "ANTHROPIC_BASE_URL",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_TOKENS",
    "GEMINI_BASE_URL",
    "OPENAI_BASE_URL",
    "AnthropicClient",
    "GeminiClient",
    "HttpLLMClient",
    "LLMAuthError",
    "LLMCallError",
    "LLMClient",
    "LLMSetupError",
    "OpenAIClient",
]
