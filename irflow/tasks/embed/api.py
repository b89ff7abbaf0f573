"""Embedding models behind an API: ``dense:openai:<model>`` through any OpenAI-compatible
``/embeddings`` endpoint (OpenAI, Azure-style gateways, vLLM, TEI, Ollama, LiteLLM).

The base URL and key are read as the OpenAI SDK reads them (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``;
spec options ``base_url`` and ``key_env`` override). Requests carry at most ``batch_size`` texts and
``batch_tokens`` tokens, ``concurrency`` of them in flight, within ``rpm``/``tpm``; every call goes
through :mod:`irflow.tasks.core.http_client` (retries honouring ``Retry-After``, a refused key stops at once,
the key redacted from every message). Answers may hold float lists or base64 float32 (the SDK's
default); vectors are L2-normalised like every cached vector.

The vectors' identity (the embedding cache key) is provider + model + dimensions + base URL: the
limits and the key change nothing in them, so a rerun, or a run with other limits, reads the cache
and sends no request. Token counts come from tiktoken where it is installed and knows the model,
else from an estimate (UTF-8 bytes / 4); the tokens the API reports are what the cost is computed
from after the run.
"""

from __future__ import annotations

import base64
import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from irflow.tasks.core.redact import remember
from irflow.tasks.core.schema import InputError, IrflowError
from irflow.tasks.systems.api_options import API_OPTIONS, PROVIDER, check_base_url, is_api_model, normalise_options

OPENAI_BASE_URL = "https://api.openai.com/v1"
PRICES_PER_1M: dict[str, float] = {  # USD per 1M input tokens, api.openai.com list prices (2026)
    "text-embedding-3-small": 0.02,
    "text-embedding-3-large": 0.13,
    "text-embedding-ada-002": 0.10,
}
MAX_INPUTS = 2048  # texts per request that the OpenAI API accepts


class EmbeddingApiError(IrflowError):
    """An embedding API answered something other than one finite vector per text."""


@dataclass
class Usage:
    """What one model's requests cost in this process (thread-safe)."""

    calls: int = 0
    attempts: int = 0
    tokens: int = 0
    tokens_reported: bool = True  # False once an answer came without usage (then the estimate counts)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, attempts: int, tokens: int, reported: bool) -> None:
        with self._lock:
            self.calls += 1
            self.attempts += attempts
            self.tokens += tokens
            self.tokens_reported &= reported

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return self.calls, self.attempts, self.tokens


@dataclass(frozen=True)
class ApiModel:
    """An embedding model behind an OpenAI-compatible API, usable wherever a local model is encoded."""

    model: str
    base_url: str = OPENAI_BASE_URL
    dimensions: int | None = None
    key_env: str = "OPENAI_API_KEY"
    batch_size: int = 32
    batch_tokens: int = 100_000
    concurrency: int = 4
    rpm: float | None = None
    tpm: float | None = None
    price: float | None = None
    timeout: float = 60.0
    retries: int = 5
    usage: Usage = field(default_factory=Usage, compare=False, repr=False)

    @classmethod
    def from_spec(cls, model: str, options: Sequence[tuple[str, str]], batch_size: int) -> ApiModel:
        """The model of ``dense(<options>):openai:<model>`` (options as :func:`normalise_options` wrote them)."""
        kw: dict[str, Any] = {k: API_OPTIONS[k](v) for k, v in options}
        env_url = os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        kw.setdefault("base_url", check_base_url(env_url, "OPENAI_BASE_URL"))
        return cls(model=model.removeprefix(f"{PROVIDER}:"), batch_size=min(batch_size, MAX_INPUTS), **kw)

    @property
    def name(self) -> str:
        return f"{PROVIDER}:{self.model}"

    @property
    def identity(self) -> str:
        """What the vectors depend on: provider, model, dimensions and endpoint (cache key, tracking)."""
        dims = f"#dimensions={self.dimensions}" if self.dimensions else ""
        return f"{PROVIDER}:{self.model}@{self.base_url}{dims}"

    @property
    def price_per_1m(self) -> float | None:
        """USD per 1M tokens: the ``price`` option, else OpenAI's list price on api.openai.com, else unknown."""
        if self.price is not None:
            return self.price
        return PRICES_PER_1M.get(self.model) if self.base_url == OPENAI_BASE_URL else None

    def prompt(self, role: str, override: str | None = None) -> str:
        return override or ""

    def key(self) -> str | None:
        """The API key from the environment; required by api.openai.com, optional for local servers."""
        key = os.environ.get(self.key_env) or None
        remember(key)
        if key is None and self.base_url == OPENAI_BASE_URL:
            raise InputError(f"{self.name}: set the API key in the environment variable {self.key_env}")
        return key

    # -- planning -------------------------------------------------------------------------------

    def batches(self, tokens: Sequence[int]) -> list[range]:
        """Consecutive text ranges of at most ``batch_size`` texts and ``batch_tokens`` tokens (a longer
        text goes alone)."""
        out, start, total = [], 0, 0
        for i, n in enumerate(tokens):
            if i > start and (i - start >= self.batch_size or total + n > self.batch_tokens):
                out.append(range(start, i))
                start, total = i, 0
            total += n
        if start < len(tokens):
            out.append(range(start, len(tokens)))
        return out

    def estimate(self, texts: Sequence[str]) -> dict[str, Any]:
        """Calls, tokens and USD that embedding ``texts`` would cost (nothing is sent)."""
        tokens, method = count_tokens(texts, self.model)
        price = self.price_per_1m
        total = int(sum(tokens))
        return {
            "texts": len(texts),
            "calls": len(self.batches(tokens)),
            "tokens": total,
            "tokens_counted_by": method,
            "price_per_1m_tokens": price,
            "usd": None if price is None else total * price / 1e6,
        }

    # -- encoding -------------------------------------------------------------------------------

    def encode(self, texts: Sequence[str], *, prompt: str = "") -> np.ndarray:
        """L2-normalised float32 vectors of ``prompt + text`` for each text, row i <-> texts[i]."""
        import httpx

        from irflow.tasks.core.http_client import Call, RateLimiter, RetryPolicy

        texts = [(prompt + t) or " " for t in texts]  # the API refuses empty inputs
        if not texts:
            return np.empty((0, self.dimensions or 0), dtype=np.float32)
        tokens, _ = count_tokens(texts, self.model)
        key = self.key()
        call = Call(
            f"{self.base_url}/embeddings",
            f"embedding model {self.name}",
            (key,) if key else (),
            RetryPolicy(retries=self.retries),
            f"check {self.key_env}",
            RateLimiter(self.rpm, self.tpm),
        )
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        batches = self.batches(tokens)
        out: list[np.ndarray | None] = [None] * len(batches)
        progress = _progress(len(texts), self.name)
        stop = threading.Event()

        with httpx.Client(timeout=self.timeout, headers=headers) as client:

            def send(b: int) -> None:
                if stop.is_set():  # another batch failed: do not spend more calls
                    return
                rows = batches[b]
                body: dict[str, Any] = {"model": self.model, "input": texts[rows.start : rows.stop]}
                body["encoding_format"] = "base64"  # a quarter of the JSON floats' bytes
                if self.dimensions:
                    body["dimensions"] = self.dimensions
                estimate = int(sum(tokens[rows.start : rows.stop]))
                try:
                    reply = call.post(client, body, tokens=estimate)
                    out[b] = self._vectors(reply.json, len(rows))
                except BaseException:
                    stop.set()
                    raise
                used = _reported_tokens(reply.json)
                self.usage.add(reply.attempts, estimate if used is None else used, used is not None)
                progress.update(len(rows))

            with ThreadPoolExecutor(max_workers=max(1, self.concurrency)) as pool:
                futures = [pool.submit(send, b) for b in range(len(batches))]
                try:
                    for future in futures:
                        future.result()
                except BaseException:
                    stop.set()
                    raise
                finally:
                    progress.close()
        return np.concatenate([m for m in out if m is not None])

    def _vectors(self, answer: Any, expected: int) -> np.ndarray:
        """One unit-length float32 row per input, in input order, from an embeddings answer."""
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list) or len(data) != expected:
            got = len(data) if isinstance(data, list) else "no 'data' list"
            raise EmbeddingApiError(f"embedding model {self.name}: expected {expected} embeddings, got {got}")
        rows: list[Any] = [None] * expected
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            value = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < expected or rows[index] is not None:
                raise EmbeddingApiError(f"embedding model {self.name}: bad or repeated index {index!r} in 'data'")
            if isinstance(value, str):
                try:
                    rows[index] = np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4")
                except ValueError:
                    raise EmbeddingApiError(
                        f"embedding model {self.name}: an embedding is not base64 float32"
                    ) from None
            elif isinstance(value, list):
                rows[index] = np.asarray(value, dtype=np.float64)
            else:
                raise EmbeddingApiError(f"embedding model {self.name}: item {position} has no 'embedding'")
        widths = {len(r) for r in rows}
        if len(widths) != 1 or 0 in widths or (self.dimensions and widths != {self.dimensions}):
            want = f" ({self.dimensions} asked)" if self.dimensions else ""
            raise EmbeddingApiError(f"embedding model {self.name}: vector lengths {sorted(widths)}{want}")
        matrix = np.vstack(rows).astype(np.float64)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        if not np.isfinite(matrix).all() or (norms == 0).any():
            raise EmbeddingApiError(f"embedding model {self.name}: non-finite or all-zero vectors in the answer")
        return (matrix / norms).astype(np.float32)


def _reported_tokens(answer: Any) -> int | None:
    usage = answer.get("usage") if isinstance(answer, dict) else None
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "total_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return None


def count_tokens(texts: Sequence[str], model: str) -> tuple[list[int], str]:
    """Tokens per text and how they were counted: tiktoken's encoding for ``model`` where tiktoken is
    installed and has it (offline it needs its cached files), else UTF-8 bytes / 4 rounded up."""
    encoding = _tiktoken_encoding(model)
    if encoding is not None:
        return [len(t) for t in encoding.encode_ordinary_batch(list(texts))], f"tiktoken:{encoding.name}"
    return [max(1, -(-len(t.encode("utf-8")) // 4)) for t in texts], "estimate:utf8_bytes/4"


def _tiktoken_encoding(model: str) -> Any:
    try:
        import tiktoken  # type: ignore[import-not-found,unused-ignore]  # optional (the rag test extra brings it)
    except ImportError:
        return None
    try:
        try:
            return tiktoken.encoding_for_model(model)
        except KeyError:
            return tiktoken.get_encoding("cl100k_base")
    except Exception:  # its files cannot be fetched (offline): estimate instead
        return None


class _NoProgress:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, name: str) -> Any:
    """A progress bar (texts/s, ETA) on a terminal; nothing otherwise."""
    if total < 64 or not sys.stderr.isatty():
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, desc=f"embedding with {name}", unit="text", leave=False, file=sys.stderr)


__all__ = ["API_OPTIONS", "ApiModel", "EmbeddingApiError", "Usage", "count_tokens", "is_api_model", "normalise_options"]
