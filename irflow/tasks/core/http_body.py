"""The HTTP layer's errors and its answers read within limits: every answer is read as a stream, a piece at a
time (:class:`BodyReader`), within its body's bytes (``IRFLOW_MAX_RESPONSE_BYTES``) and the time from the
request to the body's last byte (``IRFLOW_RESPONSE_SECONDS``); past either, :class:`HttpLimitError`. A stop
(SIGTERM) is seen between pieces, in every thread. :func:`bounded_hook` applies the same limits to httpx
clients irflow does not drive itself."""

from __future__ import annotations

import json
import time
from typing import Any

from irflow.tasks.core.limits import MAX_RESPONSE_BYTES, RESPONSE_SECONDS
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.core.stop import check_stop


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


PIECE = 1 << 16  # bytes asked for at a time


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


class HttpAnswer:
    """What :meth:`Call.post` reads from an answer, as httpx names it."""

    def __init__(self, status: int, headers: Any, content: bytes) -> None:
        self.status_code, self.headers, self.content = status, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


__all__ = ["PIECE", "BodyReader", "HttpAnswer", "HttpAuthError", "HttpCallError", "HttpLimitError", "bounded_hook"]
