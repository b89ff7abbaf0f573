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

httpx is imported by the callers that build clients; this module only drives them, and adds
:class:`KeepAliveClient`, a plain ``http.client`` connection per thread for callers whose own time
matters (a search service's latency): it costs a fraction of an httpx request per call.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import random
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, NamedTuple

from irflow.tasks.core.limits import MAX_RESPONSE_BYTES, RESPONSE_SECONDS
from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.core.stop import check_stop

log = logging.getLogger(__name__)


class HttpCallError(IrflowError):
    """A call failed: a request the server refuses, an answer that is not JSON, or retries exhausted."""

    def __init__(self, message: str, *, attempts: int = 1, status: int | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.status = status


class HttpAuthError(HttpCallError):
    """The server refused the credentials (401/403): the run stops instead of repeating the refusal."""


class HttpLimitError(HttpCallError):
    """An answer's body passed ``IRFLOW_MAX_RESPONSE_BYTES`` or took longer than ``IRFLOW_RESPONSE_SECONDS``
    (a body that never ends): not retried, the server would do it again."""


_PIECE = 1 << 16


class BodyReader:
    """Reads one answer's body within the limits: ``who`` and ``url`` name it in the error; the clock started
    when the request was sent."""

    def __init__(self, who: str, url: str) -> None:
        self.who, self.url = who, url
        self.most = MAX_RESPONSE_BYTES.bytes()
        self.seconds = RESPONSE_SECONDS.value()
        self.deadline = time.monotonic() + self.seconds
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, piece: bytes) -> None:
        """Keep ``piece``; fails past the bytes or the time allowed, or once a stop was asked for."""
        check_stop()
        self.size += len(piece)
        if self.size > self.most:
            raise HttpLimitError(f"{self.who}: {self.url} " + MAX_RESPONSE_BYTES.passed("answered a body too large"))
        if time.monotonic() > self.deadline:
            sending = f"was still sending its answer ({self.size:,} bytes)"
            raise HttpLimitError(f"{self.who}: {self.url} " + RESPONSE_SECONDS.passed(sending))
        self.parts.append(piece)

    def content(self) -> bytes:
        return b"".join(self.parts)

    def read(self, chunks: Any) -> bytes:
        """All of ``chunks`` (an iterator of bytes), within the limits."""
        for piece in chunks:
            self.add(piece)
        return self.content()

    async def aread(self, chunks: Any) -> bytes:
        """All of ``chunks`` (an async iterator of bytes), within the limits."""
        async for piece in chunks:
            self.add(piece)
        return self.content()


def bounded_hook(who: str) -> Any:
    """An httpx ``response`` event hook for clients irflow does not drive itself (Chroma's): the body is read
    within the same limits (the hook wraps the stream before the client reads it)."""
    import httpx

    class _Bounded(httpx.SyncByteStream):
        def __init__(self, stream: Any, url: str) -> None:
            self.stream, self.url = stream, url

        def __iter__(self) -> Any:
            reader = BodyReader(who, self.url)
            for piece in self.stream:
                reader.add(piece)
                yield piece

        def close(self) -> None:
            self.stream.close()

    def hook(response: Any) -> None:
        response.stream = _Bounded(response.stream, str(response.request.url))

    return hook


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
            return _Response(streamed.status_code, streamed.headers, reader.read(streamed.iter_bytes()))

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
                    response = _Response(streamed.status_code, streamed.headers, content)
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


class _Response:
    """What :meth:`Call.post` reads from an answer, as httpx names it."""

    def __init__(self, status: int, headers: Any, content: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


class KeepAliveClient:
    """JSON POSTs over one keep-alive ``http.client`` connection per thread, for :meth:`Call.post`.

    ``post(url, json=..., headers=...)`` like ``httpx.Client.post`` (the URL must be the one the client
    was made for). A connection the server closed while idle is reopened and the request sent again
    once, as httpx does; other failures reach the caller's retry policy. Proxies are not supported:
    :func:`keep_alive_usable` says when a URL needs one (then use httpx).
    """

    def __init__(self, url: str, headers: dict[str, str], timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url, self.timeout = url, timeout
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.headers = dict(headers)
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = self._local.conn = cls(self.host, self.port, timeout=self.timeout)
            with self._lock:
                self._all.append(conn)
        return conn

    def post(self, url: str, *, json: Any, headers: dict[str, str] | None = None, who: str = "") -> _Response:
        if url != self.url:
            raise ValueError(f"this client posts to {self.url}, not {url}")
        body = _dumps(json).encode()
        sent_headers = {**self.headers, **(headers or {})}
        for attempt in (1, 2):
            conn = self._connection()
            reused = conn.sock is not None
            try:
                reader = BodyReader(who or "the service", self.url)
                conn.request("POST", self.target, body=body, headers=sent_headers)
                response = conn.getresponse()
                content = reader.read(iter(partial(response.read1, _PIECE), b""))
                response.read()  # read1 leaves a Content-Length answer open at its end: this closes it
            except (ConnectionError, http.client.RemoteDisconnected, http.client.BadStatusLine):
                conn.close()
                if reused and attempt == 1:
                    continue  # the server closed an idle keep-alive connection: once more on a fresh one
                raise
            except BaseException:
                conn.close()
                raise
            if response.will_close:
                conn.close()
            return _Response(response.status, response.headers, content)
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def keep_alive_usable(url: str) -> bool:
    """Whether :class:`KeepAliveClient` can reach ``url``: http(s) and no proxy from the environment
    applies to it (httpx honours ``HTTP(S)_PROXY``/``NO_PROXY``; this client does not)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return True
    return bool(urllib.request.proxy_bypass_environment(parts.hostname, proxies))  # type: ignore[attr-defined]


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
