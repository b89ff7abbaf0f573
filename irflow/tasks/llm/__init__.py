"""irflow LLM stage: the chat clients every LLM step shares, and their cached, concurrent, counted calls.

Public API::

    from irflow.tasks.llm import make_llm, ask_all, AnswerCache, request_key, estimate_tokens

Modules: ``clients`` (any OpenAI-compatible chat API, Anthropic's Messages API and Gemini's generateContent,
all over irflow's HTTP client layer: keys from the environment, retries, rate limits, bounded answers,
reasoning and thinking budgets, usage as the provider counts it; what they share, and the errors, in
``client_base``), ``specs`` (the spec grammar
``kind[(options)]:model``, :data:`LLM_KINDS`, credentials in a base URL refused as the spec is parsed),
``calls`` (any prompt asked of a client, concurrently, each answer cached by the client's identity and the
whole prompt so no call is paid twice),
``tokens`` (token and USD estimates). What is asked is the caller's: zELO's pairwise judges
(``irflow.tasks.annotate``), query synthesis (``irflow.tasks.evalsets``), RAG generation and judging
(``irflow.tasks.rag``).
"""

from __future__ import annotations

from irflow.tasks.llm.calls import AnswerCache, Asked, GeneratorAuthError, Outcome, ask_all, request_key
from irflow.tasks.llm.clients import (
    DEFAULT_MAX_CHARS,
    AnthropicClient,
    GeminiClient,
    LLMAuthError,
    LLMCallError,
    LLMClient,
    LLMSetupError,
    OpenAIClient,
)
from irflow.tasks.llm.specs import LLM_KINDS, LLMSpec, make_client, make_llm, parse_llm
from irflow.tasks.llm.tokens import DEFAULT_PRICE_PER_1K, estimate_tokens

__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_PRICE_PER_1K",
    "LLM_KINDS",
    "AnswerCache",
    "AnthropicClient",
    "Asked",
    "GeminiClient",
    "GeneratorAuthError",
    "LLMAuthError",
    "LLMCallError",
    "LLMClient",
    "LLMSetupError",
    "LLMSpec",
    "OpenAIClient",
    "Outcome",
    "ask_all",
    "estimate_tokens",
    "make_client",
    "make_llm",
    "parse_llm",
    "request_key",
]
