"""The one HTTP client layer for the APIs irflow calls: search services (``http:``), embedding APIs
(``dense:openai:``) and LLM judges.

A JSON POST is retried on 429, 5xx and transport errors, waiting what ``Retry-After`` says (seconds
or an HTTP date) or else an exponential, jittered backoff; a ``Retry-After`` longer than the policy
allows fails instead of stalling a run. A refused key (401/403) stops at once: every other call would
be refused too. Requests- and tokens-per-minute budgets are token buckets shared by every caller of a
:class:`RateLimiter` (threads or one event loop). Secrets (API keys, tokens) are replaced by ``***``
in every message this module writes (:mod:`irflow.tasks.core.redact`), since error bodies may echo
request headers.

Every answer is read as a stream, a piece at a time, within two limits (:mod:`irflow.tasks.core.limits`):
its body's bytes (``IRFLOW_MAX_RESPONSE_BYTES``) and the time from the request to the body's last byte
(``IRFLOW_RESPONSE_SECONDS``; the client's timeout bounds each wait, not a body that keeps trickling in). A
body past either fails at once with :class:`HttpLimitError`, not retried; a stop (SIGTERM) is seen
between pieces, in every thread.

httpx is imported by the callers that build clients; this module only drives them. The errors and the bounded
reading of answers live in ``http_body``, :class:`KeepAliveClient` (a plain ``http.client`` connection per
thread) in ``http_keepalive``; both are re-exported here.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import random
import threading
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, NamedTuple

from irflow.tasks.core.http_body import (
    BodyReader,
    HttpAnswer,
    HttpAuthError,
    HttpCallError,
    HttpLimitError,
    bounded_hook,
)
from irflow.tasks.core.http_keepalive import KeepAliveClient, keep_alive_usable
from irflow.tasks.core.redact import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry: ``retries`` after the first attempt; waits of ``backoff`` doubling
    up to ``max_backoff`` (times a jitter in [0.5, 1]) unless the server says how long (``Retry-After``,
    at most ``max_retry_after`` seconds)."""

    retries: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        if retry_after is not None:
            return retry_after
        return min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


class Reply(NamedTuple):
    """A decoded JSON answer and the number of attempts it took."""

    json: Any
    attempts: int


class RateLimiter:
    """Requests- and tokens-per-minute budgets as token buckets (``None`` = unlimited).

    Each bucket starts full (a burst of one minute's budget) and refills continuously. A caller
    reserves what it is about to spend and waits until the buckets are back to zero, so concurrent
    callers queue in the order they reserved and the long-run rate never exceeds the budget.
    """

    def __init__(self, rpm: float | None = None, tpm: float | None = None) -> None:
        for name, value in (("rpm", rpm), ("tpm", tpm)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a positive number of units per minute, not {value!r}")
        self.rpm, self.tpm = rpm, tpm
        self._level = {"requests": float(rpm or 0), "tokens": float(tpm or 0)}
        self._last = time.monotonic()
        self._lock = threading.Lock()

    @property
    def limited(self) -> bool:
        return self.rpm is not None or self.tpm is not None

    def reserve(self, tokens: int = 0) -> float:
        """Take one request and ``tokens`` tokens from the buckets; returns the seconds to wait before sending."""
        if not self.limited:
            return 0.0
        with self._lock:
            now = time.monotonic()
            elapsed, self._last = now - self._last, now
            wait = 0.0
            for bucket, per_minute, spend in (("requests", self.rpm, 1), ("tokens", self.tpm, tokens)):
                if per_minute is None:
                    continue
                rate = per_minute / 60.0
                level = min(float(per_minute), self._level[bucket] + elapsed * rate) - spend
                self._level[bucket] = level
                if level < 0:
                    wait = max(wait, -level / rate)
            return wait

    def wait(self, tokens: int = 0) -> None:
        delay = self.reserve(tokens)
        if delay > 0:
            time.sleep(delay)

    async def await_turn(self, tokens: int = 0) -> None:
        delay = self.reserve(tokens)
        if delay > 0:
            await asyncio.sleep(delay)


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Call:
    """One endpoint as its callers describe it: where, what to call it in errors, what to hide, how to retry."""

    url: str
    who: str
    secrets: tuple[str, ...] = ()
    policy: RetryPolicy = RetryPolicy()
    auth_hint: str = ""  # e.g. "check OPENAI_API_KEY", appended to a 401/403 message
    limiter: RateLimiter | None = None

    def _problem(self, text: str) -> str:
        return redact(text, self.secrets)

    def _outcome(self, response: Any, attempt: int) -> tuple[Any, str, float | None]:
        """``(answer, "", None)`` on success; else ``(None, problem, retry_after)`` for a retryable failure.
        Raises for failures that retrying cannot fix."""
        status = response.status_code
        if status < 300:
            try:
                return response.json(), "", None
            except ValueError:
                shown = self._problem(response.text[:200])
                raise HttpCallError(f"{self.who}: the answer is not JSON: {shown!r}", attempts=attempt) from None
        problem = f"HTTP {status}: {self._problem(response.text[:300])!r}"
        if status in (401, 403):
            hint = f" ({self.auth_hint})" if self.auth_hint else ""
            raise HttpAuthError(
                f"{self.who}: {self.url} refused the credentials: {problem}{hint}", attempts=attempt, status=status
            )
        if status != 429 and status < 500:
            raise HttpCallError(f"{self.who}: {self.url} answered {problem}", attempts=attempt, status=status)
        after = retry_after_seconds(response.headers.get("Retry-After"))
        if after is not None and after > self.policy.max_retry_after:
            raise HttpCallError(
                f"{self.who}: {self.url} asks to retry after {after:.0f} s (> {self.policy.max_retry_after:.0f} s)",
                attempts=attempt,
                status=status,
            )
        return None, problem, after

    def _give_up(self, attempt: int, problem: str) -> HttpCallError:
        return HttpCallError(f"{self.who}: {self.url} failed {attempt} times; last: {problem}", attempts=attempt)

    def post(self, client: Any, body: Any, *, tokens: int = 0, headers: dict[str, str] | None = None) -> Reply:
        """POST ``body`` as JSON with an ``httpx.Client``; retries as the policy says."""
        import httpx

        for attempt in range(1, self.policy.retries + 2):
            if self.limiter is not None:
                self.limiter.wait(tokens)
            after = None
            try:
                response = self._send(client, body, headers)
            except (httpx.TransportError, OSError, http.client.HTTPException) as exc:
                problem = self._problem(f"{type(exc).__name__}: {exc}")
            else:
                answer, problem, after = self._outcome(response, attempt)
                if not problem:
                    return Reply(answer, attempt)
            if attempt > self.policy.retries:
                raise self._give_up(attempt, problem)
            delay = self.policy.delay(attempt, after)
            log.info("%s: %s; retry %d/%d in %.1fs", self.who, problem[:80], attempt, self.policy.retries, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _send(self, client: Any, body: Any, headers: dict[str, str] | None) -> Any:
        """One POST, its body read within the limits (an ``httpx.Client`` streamed; a :class:`KeepAliveClient`
        reads within them itself)."""
        if isinstance(client, KeepAliveClient):
            return client.post(self.url, json=body, headers=headers, who=self.who)
        reader = BodyReader(self.who, self.url)
        with client.stream("POST", self.url, json=body, headers=headers) as streamed:
            return HttpAnswer(streamed.status_code, streamed.headers, reader.read(streamed.iter_bytes()))

    async def apost(self, client: Any, body: Any, *, tokens: int = 0, headers: dict[str, str] | None = None) -> Reply:
        """POST ``body`` as JSON with an ``httpx.AsyncClient``; retries as the policy says."""
        import httpx

        for attempt in range(1, self.policy.retries + 2):
            if self.limiter is not None:
                await self.limiter.await_turn(tokens)
            after = None
            try:
                reader = BodyReader(self.who, self.url)
                async with client.stream("POST", self.url, json=body, headers=headers) as streamed:
                    content = await reader.aread(streamed.aiter_bytes())
                    response = HttpAnswer(streamed.status_code, streamed.headers, content)
            except httpx.TransportError as exc:
                problem = self._problem(f"{type(exc).__name__}: {exc}")
            else:
                answer, problem, after = self._outcome(response, attempt)
                if not problem:
                    return Reply(answer, attempt)
            if attempt > self.policy.retries:
                raise self._give_up(attempt, problem)
            delay = self.policy.delay(attempt, after)
            log.info("%s: %s; retry %d/%d in %.1fs", self.who, problem[:80], attempt, self.policy.retries, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")


__all__ = [
    "KeepAliveClient",
    "keep_alive_usable",
    "BodyReader",
    "Call",
    "HttpAuthError",
    "HttpCallError",
    "HttpLimitError",
    "bounded_hook",
    "RateLimiter",
    "Reply",
    "RetryPolicy",
    "retry_after_seconds",
]
