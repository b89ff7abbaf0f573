"""LLM specs: parse ``kind[(options)]:model`` and make the client it names.

Kinds (:data:`LLM_KINDS`):

* ``openai:MODEL[@BASE_URL]`` — any OpenAI-compatible chat API (OpenAI, vLLM, Ollama, LM Studio...)
  over irflow's HTTP client layer; key from ``$OPENAI_API_KEY`` (option ``key_env``), optional for local servers.
* ``anthropic:MODEL`` and ``gemini:MODEL`` — Anthropic's Messages API and Gemini's generateContent, over the
  same HTTP client layer (no SDK); keys from ``$ANTHROPIC_API_KEY`` and ``$GEMINI_API_KEY``.

Options: ``name``, ``concurrency`` (calls in flight), ``price`` (USD per 1k tokens, for estimates),
``key_env``, ``max_retries``, ``timeout``, ``max_tokens``, ``max_chars`` (of each document shown),
``response_format`` (json_object | json_schema |
none) and ``reasoning`` (openai), ``backoff``, ``rpm``/``tpm``, ``base_url`` and ``thinking`` (anthropic, gemini).
A base URL carrying credentials is refused here, when the spec is parsed (:mod:`irflow.tasks.core.urls`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from irflow.tasks.core.schema import InputError
from irflow.tasks.core.urls import refuse_credentials
from irflow.tasks.llm.clients import AnthropicClient, GeminiClient, LLMClient, OpenAIClient
from irflow.tasks.llm.tokens import DEFAULT_PRICE_PER_1K

LLM_KINDS = ("openai", "anthropic", "gemini")
OPTIONS = {
    "openai": frozenset(
        {
            *("name", "concurrency", "price", "key_env", "max_retries", "backoff", "timeout", "max_tokens"),
            *("max_chars", "response_format", "reasoning", "rpm", "tpm"),
        }
    ),
    **{
        kind: frozenset(
            {
                *("name", "concurrency", "price", "key_env", "max_retries", "backoff", "timeout", "max_tokens"),
                *("max_chars", "rpm", "tpm", "base_url", "thinking"),
            }
        )
        for kind in ("anthropic", "gemini")
    },
}
NUMBERS: dict[str, Callable[[str], int | float]] = {
    "concurrency": int,
    "max_retries": int,
    "max_tokens": int,
    "max_chars": int,
    "price": float,
    "backoff": float,
    "timeout": float,
    "rpm": float,
    "tpm": float,
}
SPEC = re.compile(r"^(?P<kind>[a-z]+)(?:\((?P<options>[^()]*)\))?:(?P<target>.+)$")


@dataclass(frozen=True)
class LLMSpec:
    """A parsed LLM spec: ``kind``, ``target`` (``MODEL`` or, for openai, ``MODEL@BASE_URL``) and options."""

    kind: str
    target: str
    options: tuple[tuple[str, str], ...] = ()

    def __str__(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.kind}{f'({opts})' if opts else ''}:{self.target}"


def kinds_hint() -> str:
    return ", ".join(k + ":MODEL" for k in LLM_KINDS)


def parse_llm(text: str, argument: str = "--llm") -> LLMSpec:
    """Parse an LLM spec; InputError naming ``argument`` on a bad one, and
    :class:`~irflow.tasks.core.urls.CredentialsInUrlError` when its base URL (or ``OPENAI_BASE_URL``)
    carries credentials."""
    match = SPEC.match(str(text).strip())
    if not match or match["kind"] not in LLM_KINDS:
        raise InputError(f"{argument} takes an LLM spec ({kinds_hint()}), not {text!r}")
    kind, target = match["kind"], match["target"].strip()
    allowed = OPTIONS[kind]
    options = []
    for item in filter(None, (s.strip() for s in (match["options"] or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in allowed:
            raise InputError(f"bad option {item!r} in LLM spec {text!r}; {kind} options: {', '.join(sorted(allowed))}")
        options.append((key.strip(), value.strip()))
    spec = LLMSpec(kind, target, tuple(options))
    _refuse_credentials(spec, argument)
    return spec


def _refuse_credentials(spec: LLMSpec, argument: str) -> None:
    """The one rule for URLs (:mod:`irflow.tasks.core.urls`) on the spec's base URL: ``@BASE_URL``, option
    ``base_url`` or, for ``openai`` without one, ``OPENAI_BASE_URL``."""
    opt = dict(spec.options)
    key = opt.get("key_env") or f"{spec.kind.upper()}_API_KEY"
    env = f"{key}, or the variable key_env=VARIABLE names"
    if "base_url" in opt:
        refuse_credentials(opt["base_url"], f"{argument} (base_url)", env)
    if spec.kind == "openai":
        base_url = spec.target.partition("@")[2]
        if base_url:
            refuse_credentials(base_url, argument, env)
        elif os.environ.get("OPENAI_BASE_URL"):
            refuse_credentials(os.environ["OPENAI_BASE_URL"], f"{argument} (OPENAI_BASE_URL)", env)


def make_client(spec: LLMSpec, *, role: str = "LLM", price_per_1k: float | None = None) -> LLMClient:
    """The client ``spec`` names. Nothing is called or imported yet (``prepare`` does that), so a dry run is free."""
    try:
        kw: dict[str, Any] = {k: NUMBERS[k](v) if k in NUMBERS else v for k, v in spec.options}
    except ValueError as err:
        raise InputError(f"bad option value in LLM spec {spec}: {err}") from None
    price = kw.pop("price", price_per_1k if price_per_1k is not None else DEFAULT_PRICE_PER_1K)
    if spec.kind == "openai":
        model, _, base_url = spec.target.partition("@")
        return OpenAIClient(model, base_url or None, price_per_1k=price, role=role, **kw)
    cls = AnthropicClient if spec.kind == "anthropic" else GeminiClient
    return cls(spec.target, price_per_1k=price, role=role, **kw)


def make_llm(
    spec: str,
    option: str = "--llm",
    role: str = "LLM",
    *,
    free_text: bool = False,
    price_per_1k: float | None = None,
    answer_schema: tuple[str, dict[str, Any]] | None = None,
) -> LLMClient:
    """The client an LLM spec string names, checked as ``option``'s value. ``free_text``: no JSON answer
    format unless the spec sets one; ``answer_schema``: the schema ``response_format=json_schema`` sends."""
    parsed = parse_llm(spec, option)
    client = make_client(parsed, role=role, price_per_1k=price_per_1k)
    if isinstance(client, OpenAIClient):
        client.answer_schema = answer_schema
        if free_text and "response_format" not in dict(parsed.options):
            client.response_format = "none"
    return client
