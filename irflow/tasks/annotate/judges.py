"""Judges: who says which of two documents is more relevant to a query.

A judge scores a battle ``(query, A, B)`` in [−1, 1]: negative = A is more relevant, positive
= B, 0 = a tie. A failed call or an answer that does not parse is a *missing* vote
(``Verdict.score is None`` with the reason in ``error``), never a silent 0. Judges see
documents in the order they are given; the runner swaps A and B at random and undoes the swap.

Kinds (spec strings for :func:`parse_judge`, ``kind[(options)]:target``):

* ``openai:MODEL[@BASE_URL]`` — any OpenAI-compatible chat API (OpenAI, vLLM, Ollama, LM Studio...)
  over httpx; retries with exponential backoff on 429, 5xx and transport errors (``Retry-After``
  honoured); key from ``$OPENAI_API_KEY`` (option ``key_env``), optional for local servers.
* ``anthropic:MODEL`` and ``gemini:MODEL`` — through their SDKs (optional extras
  ``irflow[anthropic]``, ``irflow[gemini]``, imported only when used); keys from
  ``$ANTHROPIC_API_KEY`` and ``$GEMINI_API_KEY``.
* ``model:MODEL`` — a local judge from any irflow relevance model (``tasks.embed.score_pairs``:
  cross-encoder score or bi-encoder cosine); ``system:SPEC`` — from the scores of any irflow
  system's run (``tasks.retrieve``). Scores are standardised per query (z-scores over the
  query's candidates, so judges on different scales are comparable) and the preference is
  ``tanh(scale · (z_B − z_A))``: negative when A scores higher.

Options: ``name``, ``concurrency`` (calls in flight per provider), ``price`` (USD per 1k tokens,
for ``--dry-run``), ``key_env``, ``max_retries``, ``timeout``, ``max_tokens``, ``max_chars``,
``response_format`` (json_object | json_schema | none), ``base_url`` (SDK judges), ``scale``, ``depth``.
API keys are read from the environment at call time and never logged, stored or shown.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlparse

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from irflow.tasks.schema import Dataset, InputError, IrflowError, UnknownNameError

log = logging.getLogger(__name__)

PROMPT_VERSION = "pairwise-v1"
SYSTEM_PROMPT = """\
You are an expert relevance assessor for a search engine. You are given a search query and two \
candidate documents, A and B. Decide which document better satisfies the information need behind \
the query: the one a person who typed the query would rather read. Judge relevance only, not \
length, style or the order the documents are shown in. A document that shares words with the query \
but does not answer it is not relevant.

Answer with one JSON object and nothing else:
{"reasoning": "<one to three sentences>", "score": <a number from -1 to 1>}

score: -1 = A is clearly more relevant, 1 = B is clearly more relevant, 0 = equally relevant \
(or equally irrelevant); values in between express weaker preferences."""
USER_TEMPLATE = """\
Query:
{query}

Document A:
{doc_a}

Document B:
{doc_b}

Which document is more relevant to the query? Answer with the JSON object only."""
PROMPT_SHA256 = hashlib.sha256((SYSTEM_PROMPT + "\0" + USER_TEMPLATE).encode()).hexdigest()
ANSWER_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reasoning", "score"],
    "properties": {"reasoning": {"type": "string"}, "score": {"type": "number", "minimum": -1, "maximum": 1}},
}

DEFAULT_PRICE_PER_1K = 0.005  # USD per 1k tokens (input + output), a placeholder: set yours with price=
DEFAULT_MAX_CHARS = 6000  # characters of each document shown to an LLM judge
OUTPUT_TOKENS = 120  # expected answer length, for cost estimates
OPENAI_BASE_URL = "https://api.openai.com/v1"
KINDS = ("openai", "anthropic", "gemini", "model", "system")


class JudgeSetupError(IrflowError):
    """A judge cannot run: a missing SDK or API key, a bad spec. Raised before any call is made."""


class JudgeCallError(Exception):
    """One call failed for good (after its retries): the vote is missing."""

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


@dataclass(frozen=True)
class Battle:
    """What a judge sees: a query and two documents, in the order shown."""

    query_id: str
    query: str
    doc_a_id: str
    doc_a: str
    doc_b_id: str
    doc_b: str


@dataclass(frozen=True)
class Verdict:
    """A judge's answer in the order shown: ``score`` in [−1, 1], or None = missing (``error`` says why)."""

    score: float | None
    reasoning: str = ""
    error: str | None = None
    attempts: int = 1


@runtime_checkable
class Judge(Protocol):
    """Anything that scores battles. ``name`` is unique in an ensemble; calls to one ``provider``
    share a semaphore of ``concurrency``; ``version`` changes whenever the same battle could get
    another answer (prompt, scale), so a resumed run never mixes versions."""

    name: str
    provider: str
    version: str
    concurrency: int
    price_per_1k: float
    local: bool

    def prepare(self) -> None:
        """Get ready to judge (load scores, import an SDK, find the key); JudgeSetupError if it cannot."""

    async def judge(self, battle: Battle) -> Verdict: ...

    def describe(self) -> dict[str, Any]: ...


class Answer(BaseModel):
    """The structured answer every LLM judge is asked for."""

    model_config = ConfigDict(extra="ignore")
    reasoning: str = ""
    score: float = Field(ge=-1.0, le=1.0, allow_inf_nan=False)


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


def parse_answer(text: str) -> Answer:
    """The JSON answer in ``text`` (code fences and prose around the object tolerated); ValueError if none."""
    text = _FENCE.sub("", (text or "").strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"no JSON object in answer {text[:120]!r}")
    try:
        return Answer.model_validate(json.loads(text[start : end + 1]))
    except (json.JSONDecodeError, ValidationError) as err:
        raise ValueError(f"malformed answer {text[:120]!r}: {str(err).splitlines()[0]}") from None


def render_prompt(battle: Battle, max_chars: int = DEFAULT_MAX_CHARS) -> tuple[str, str]:
    """``(system, user)`` messages of the versioned prompt; each document cut to ``max_chars``."""

    def cut(text: str) -> str:
        return text if len(text) <= max_chars else text[:max_chars] + " [...]"

    return SYSTEM_PROMPT, USER_TEMPLATE.format(query=battle.query, doc_a=cut(battle.doc_a), doc_b=cut(battle.doc_b))


def estimate_tokens(chars: int) -> int:
    """Tokens of a text of ``chars`` characters: ~4 characters a token for English."""
    return math.ceil(chars / 4)


# ---------------------------------------------------------------------------------------------
# LLM judges


class PromptJudge:
    """Shared part of the LLM judges: prompt, parsing, failure path. Subclasses implement ``_complete``."""

    kind = "llm"
    local = False
    version = PROMPT_VERSION

    def __init__(
        self,
        model: str,
        *,
        name: str | None = None,
        provider: str,
        concurrency: int = 8,
        price_per_1k: float = DEFAULT_PRICE_PER_1K,
        max_tokens: int = 400,
        max_chars: int = DEFAULT_MAX_CHARS,
        key_env: str = "",
    ) -> None:
        self.model = model
        self.name = name or f"{self.kind}:{model}"
        self.provider = provider
        self.concurrency = int(concurrency)
        self.price_per_1k = float(price_per_1k)
        self.max_tokens = int(max_tokens)
        self.max_chars = int(max_chars)
        self.key_env = key_env

    def _key(self, required: bool = True) -> str | None:
        key = os.environ.get(self.key_env) if self.key_env else None
        if required and not key:
            raise JudgeSetupError(f"judge {self.name}: set the API key in the environment variable {self.key_env}")
        return key

    def prepare(self) -> None:
        self._key()

    async def _complete(self, system: str, user: str) -> tuple[str, int]:
        """The model's answer text and the number of attempts it took; JudgeCallError on failure."""
        raise NotImplementedError

    async def judge(self, battle: Battle) -> Verdict:
        system, user = render_prompt(battle, self.max_chars)
        try:
            text, attempts = await self._complete(system, user)
        except JudgeCallError as err:
            return Verdict(None, error=str(err), attempts=err.attempts)
        try:
            answer = parse_answer(text)
        except ValueError as err:
            return Verdict(None, error=str(err), attempts=attempts)
        return Verdict(float(answer.score), answer.reasoning, None, attempts)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "provider": self.provider,
            "version": self.version,
            "prompt_sha256": PROMPT_SHA256,
            "concurrency": self.concurrency,
            "key_env": self.key_env,
            "price_per_1k": self.price_per_1k,
        }

    async def aclose(self) -> None:
        return None


class OpenAIJudge(PromptJudge):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint, called over httpx."""

    kind = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        *,
        key_env: str = "OPENAI_API_KEY",
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        timeout: float = 120.0,
        response_format: str = "json_object",
        **kwargs: Any,
    ) -> None:
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL).rstrip("/")
        parsed = urlparse(self.base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise JudgeSetupError(f"bad base URL {self.base_url!r}: expected http(s)://host[:port]/path")
        if response_format not in ("json_object", "json_schema", "none"):
            raise JudgeSetupError(f"response_format must be json_object, json_schema or none, not {response_format!r}")
        default_name = f"openai:{model}" + ("" if self.base_url == OPENAI_BASE_URL else f"@{self.base_url}")
        kwargs.setdefault("name", default_name)
        super().__init__(model, provider=parsed.netloc, key_env=key_env, **kwargs)
        self.max_retries, self.backoff, self.max_backoff = int(max_retries), float(backoff), float(max_backoff)
        self.timeout, self.response_format = float(timeout), response_format
        self._client: Any = None
        self._loop: Any = None

    def prepare(self) -> None:
        self._key(required=self.base_url == OPENAI_BASE_URL)  # local servers usually need no key

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "base_url": self.base_url,
            "response_format": self.response_format,
            "max_retries": self.max_retries,
        }

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

    def _body(self, system: str, user: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        }
        if self.response_format == "json_object":
            body["response_format"] = {"type": "json_object"}
        elif self.response_format == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "pairwise_relevance", "strict": True, "schema": ANSWER_SCHEMA},
            }
        return body

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        try:
            if retry_after is not None:
                return min(self.max_backoff, max(0.0, float(retry_after)))
        except ValueError:
            pass  # an HTTP date: fall back to exponential backoff
        return min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)

    async def _complete(self, system: str, user: str) -> tuple[str, int]:
        import httpx

        key = self._key(required=self.base_url == OPENAI_BASE_URL)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        url, body = f"{self.base_url}/chat/completions", self._body(system, user)
        attempt = 0
        while True:
            attempt += 1
            retry_after = None
            try:
                response = await self._http().post(url, json=body, headers=headers)
            except httpx.TransportError as err:
                problem = f"{type(err).__name__}: {err}"
            else:
                status = response.status_code
                if status == 200:
                    try:
                        return str(response.json()["choices"][0]["message"]["content"] or ""), attempt
                    except (ValueError, KeyError, IndexError, TypeError):
                        raise JudgeCallError(f"unexpected response {response.text[:200]!r}", attempt) from None
                problem = f"HTTP {status}: {response.text[:200]}"
                if status != 429 and status < 500:  # the request itself is wrong: retrying cannot help
                    raise JudgeCallError(problem, attempt)
                retry_after = response.headers.get("retry-after")
            if attempt > self.max_retries:
                raise JudgeCallError(f"gave up after {attempt} attempts: {problem}", attempt)
            delay = self._delay(attempt, retry_after)
            log.info("judge %s: %s; retry %d/%d in %.1fs", self.name, problem[:80], attempt, self.max_retries, delay)
            await asyncio.sleep(delay)


class AnthropicJudge(PromptJudge):
    """Claude through the ``anthropic`` SDK (which retries rate limits and 5xx itself)."""

    kind = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        key_env: str = "ANTHROPIC_API_KEY",
        max_retries: int = 5,
        concurrency: int = 4,
        base_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, provider="anthropic", key_env=key_env, concurrency=concurrency, **kwargs)
        self.max_retries, self.base_url = int(max_retries), base_url
        self.sdk: Any = None
        self._client: Any = None

    def prepare(self) -> None:
        self.sdk = _require("anthropic", "anthropic")
        self._key()

    async def _complete(self, system: str, user: str) -> tuple[str, int]:
        if self._client is None:  # (recent SDKs take no sampling temperature: the model's default applies)
            self._client = self.sdk.AsyncAnthropic(
                api_key=self._key(), max_retries=self.max_retries, base_url=self.base_url
            )
        try:
            message = await self._client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=system,
                messages=[{"role": "user", "content": user}],
            )
        except self.sdk.APIError as err:
            raise JudgeCallError(f"{type(err).__name__}: {str(err)[:200]}") from None
        return "".join(getattr(block, "text", "") or "" for block in message.content), 1


class GeminiJudge(PromptJudge):
    """Gemini through the ``google-genai`` SDK (JSON answers requested by MIME type)."""

    kind = "gemini"

    def __init__(
        self,
        model: str,
        *,
        key_env: str = "GEMINI_API_KEY",
        concurrency: int = 4,
        base_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(model, provider="gemini", key_env=key_env, concurrency=concurrency, **kwargs)
        self.base_url = base_url
        self.sdk: Any = None
        self._client: Any = None

    def prepare(self) -> None:
        self.sdk = _require("google.genai", "gemini")
        self._key()

    async def _complete(self, system: str, user: str) -> tuple[str, int]:
        if self._client is None:
            options = self.sdk.types.HttpOptions(base_url=self.base_url) if self.base_url else None
            self._client = self.sdk.Client(api_key=self._key(), http_options=options)
        config = self.sdk.types.GenerateContentConfig(
            system_instruction=system,
            temperature=0,
            max_output_tokens=self.max_tokens,
            response_mime_type="application/json",
        )
        try:
            response = await self._client.aio.models.generate_content(model=self.model, contents=user, config=config)
        except Exception as err:  # the SDK's errors share no public base class across versions
            raise JudgeCallError(f"{type(err).__name__}: {str(err)[:200]}") from None
        return str(response.text or ""), 1


def _require(module: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise JudgeSetupError(
            f"the {extra} judge needs the {module!r} package: pip install 'irflow[{extra}]'"
        ) from None


# ---------------------------------------------------------------------------------------------
# Local judges


@dataclass
class ScoreJudge:
    """A local judge from per-(query, document) relevance scores: ``tanh(scale · (z_B − z_A))``.

    ``compute()`` gives the raw score table (query_id, doc_id, score); ``prepare`` runs it once and
    standardises it per query (see :func:`standardise`).
    """

    name: str
    compute: Callable[[], pd.DataFrame]
    scale: float = 1.0
    source: dict[str, Any] = field(default_factory=dict)
    provider: str = "local"
    concurrency: int = 1
    price_per_1k: float = 0.0
    local: bool = True
    scores: dict[tuple[str, str], float] | None = None

    @property
    def version(self) -> str:
        return f"scores-v1:scale={self.scale:g}"

    def prepare(self) -> None:
        if self.scores is None:
            self.scores = standardise(self.compute())

    async def judge(self, battle: Battle) -> Verdict:
        self.prepare()
        assert self.scores is not None
        a = self.scores.get((battle.query_id, battle.doc_a_id))
        b = self.scores.get((battle.query_id, battle.doc_b_id))
        if a is None or b is None:
            return Verdict(None, error=f"no score for {battle.doc_a_id if a is None else battle.doc_b_id!r}")
        return Verdict(math.tanh(self.scale * (b - a)), f"z(A) = {a:.3f}, z(B) = {b:.3f}")

    def describe(self) -> dict[str, Any]:
        return {"kind": "local", "version": self.version, "scale": self.scale, **self.source}

    async def aclose(self) -> None:
        return None


def standardise(table: pd.DataFrame) -> dict[tuple[str, str], float]:
    """``(query_id, doc_id) -> z-score`` of ``score`` within each query (all 0 where a query's scores are equal)."""
    grouped = table.groupby("query_id", sort=False)["score"]
    std = grouped.transform("std", ddof=0).to_numpy(np.float64)
    centred = table["score"].to_numpy(np.float64) - grouped.transform("mean").to_numpy(np.float64)
    z = np.divide(centred, std, out=np.zeros_like(centred), where=std > 0)
    return dict(zip(zip(table["query_id"].astype(str), table["doc_id"].astype(str)), z.tolist()))


def model_scores(dataset: Dataset, candidates: pd.DataFrame, model: str) -> pd.DataFrame:
    """Relevance of every candidate under ``model`` (tasks.embed.score_pairs_many): query_id, doc_id, score."""
    from irflow.tasks.embed import document_texts, score_pairs_many

    doc_text = pd.Series(document_texts(dataset.corpus), index=dataset.corpus["doc_id"].astype(str).to_numpy())
    query_text = dict(zip(dataset.queries["query_id"].astype(str), dataset.queries["text"].fillna("").astype(str)))
    groups = list(candidates.groupby("query_id", sort=True))
    items = [(query_text[str(q)], doc_text.loc[g["doc_id"].astype(str)].tolist()) for q, g in groups]
    scores = score_pairs_many(model, items) if items else []
    parts = [g[["query_id", "doc_id"]].assign(score=s) for (_, g), s in zip(groups, scores)]
    return pd.concat(parts, ignore_index=True) if parts else candidates[["query_id", "doc_id"]].assign(score=0.0)


def system_scores(dataset: Dataset, candidates: pd.DataFrame, system: str, depth: int = 1000) -> pd.DataFrame:
    """Scores of every candidate in ``system``'s run (tasks.retrieve, ``depth`` hits a query).

    A candidate the system did not return gets the query's lowest returned score (a tie with the
    last hit: nothing is invented about its order), or 0 when the query returned nothing.
    """
    from irflow.tasks.retrieve import retrieve

    run = retrieve(dataset, system, min(depth, max(1, len(dataset.corpus)))).run
    merged = (
        candidates[["query_id", "doc_id"]]
        .astype(str)
        .merge(run[["query_id", "doc_id", "score"]], on=["query_id", "doc_id"], how="left")
    )
    floor = merged["query_id"].map(run.groupby("query_id")["score"].min()).fillna(0.0)
    merged["score"] = merged["score"].fillna(floor).astype(np.float64)
    return merged


# ---------------------------------------------------------------------------------------------
# Specs


@dataclass(frozen=True)
class JudgeSpec:
    """A parsed judge spec: ``kind``, ``target`` (model, system spec) and options."""

    kind: str
    target: str
    options: tuple[tuple[str, str], ...] = ()

    def option(self, key: str, default: Any = None) -> Any:
        return dict(self.options).get(key, default)

    def __str__(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.kind}{f'({opts})' if opts else ''}:{self.target}"


_SPEC = re.compile(r"^(?P<kind>[a-z]+)(?:\((?P<options>[^()]*)\))?:(?P<target>.+)$")
_OPTIONS = {
    "openai": {
        "name",
        "concurrency",
        "price",
        "key_env",
        "max_retries",
        "backoff",
        "timeout",
        "max_tokens",
        "max_chars",
        "response_format",
    },
    "anthropic": {"name", "concurrency", "price", "key_env", "max_retries", "max_tokens", "max_chars", "base_url"},
    "gemini": {"name", "concurrency", "price", "key_env", "max_tokens", "max_chars", "base_url"},
    "model": {"name", "scale"},
    "system": {"name", "scale", "depth"},
}
JUDGE_HELP = """\
judge specs (kind[(options)]:target):
  openai:MODEL[@BASE_URL]      OpenAI-compatible chat API, e.g. openai:gpt-4o-mini,
                               openai:qwen2.5@http://127.0.0.1:8000/v1 (vLLM, Ollama, ...)
                               options: name, concurrency, price, key_env (default OPENAI_API_KEY), max_retries,
                               backoff, timeout, max_tokens, max_chars, response_format=json_object|json_schema|none
  anthropic:MODEL              Claude via the anthropic SDK (pip install 'irflow[anthropic]'; ANTHROPIC_API_KEY)
  gemini:MODEL                 Gemini via the google-genai SDK (pip install 'irflow[gemini]'; GEMINI_API_KEY)
                               options of both: name, concurrency, price, key_env, max_tokens, max_chars, base_url
  model:MODEL                  local: an irflow relevance model, e.g. model:minilm (options: name, scale)
  system:SPEC                  local: an irflow system's scores, e.g. system:bm25 (options: name, scale, depth)"""


def parse_judge(text: str) -> JudgeSpec:
    """Parse a judge spec string (see ``JUDGE_HELP``); InputError / UnknownNameError on a bad one."""
    match = _SPEC.match(str(text).strip())
    if not match:
        raise InputError(f"bad judge spec {text!r}\n{JUDGE_HELP}")
    kind, target = match["kind"], match["target"].strip()
    if kind not in KINDS:
        raise UnknownNameError(
            f"unknown judge kind {kind!r} in {text!r}; valid kinds: {', '.join(KINDS)}\n{JUDGE_HELP}"
        )
    options = []
    for item in filter(None, (s.strip() for s in (match["options"] or "").split(","))):
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in _OPTIONS[kind]:
            raise InputError(
                f"bad option {item!r} in judge spec {text!r}; {kind} options: {', '.join(sorted(_OPTIONS[kind]))}"
            )
        options.append((key.strip(), value.strip()))
    return JudgeSpec(kind, target, tuple(options))


def make_judge(
    spec: JudgeSpec | str,
    *,
    dataset: Dataset | None = None,
    candidates: pd.DataFrame | None = None,
    price_per_1k: float | None = None,
) -> Judge:
    """A judge from its spec. Nothing is called or loaded yet (``prepare`` does that), so a dry run is
    free; local kinds need ``dataset`` and ``candidates`` to score later."""
    spec = parse_judge(spec) if isinstance(spec, str) else spec
    opt = dict(spec.options)
    numbers = {
        "concurrency": int,
        "max_retries": int,
        "max_tokens": int,
        "max_chars": int,
        "depth": int,
        "price": float,
        "backoff": float,
        "timeout": float,
        "scale": float,
    }
    try:
        kw = {k: numbers[k](v) if k in numbers else v for k, v in opt.items()}
    except ValueError as err:
        raise InputError(f"bad option value in judge spec {spec}: {err}") from None
    if spec.kind in ("openai", "anthropic", "gemini"):
        price = kw.pop("price", price_per_1k if price_per_1k is not None else DEFAULT_PRICE_PER_1K)
        if spec.kind == "openai":
            model, _, base_url = spec.target.partition("@")
            return OpenAIJudge(model, base_url or None, price_per_1k=price, **kw)
        cls = AnthropicJudge if spec.kind == "anthropic" else GeminiJudge
        return cls(spec.target, price_per_1k=price, **kw)
    if dataset is None or candidates is None:
        raise JudgeSetupError(f"the local judge {spec} needs the dataset and its candidates")
    scale = kw.get("scale", 1.0)
    if spec.kind == "model":
        model = spec.target
        return ScoreJudge(
            kw.get("name", f"model:{model}"), lambda: model_scores(dataset, candidates, model), scale, {"model": model}
        )
    from irflow.tasks.systems import as_spec

    system, depth = str(as_spec(spec.target)), kw.get("depth", 1000)
    return ScoreJudge(
        kw.get("name", f"system:{system}"),
        lambda: system_scores(dataset, candidates, system, depth),
        scale,
        {"system": system, "depth": depth},
    )
