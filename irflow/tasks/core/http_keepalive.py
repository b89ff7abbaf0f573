"""JSON POSTs over a plain ``http.client`` keep-alive connection per thread (:class:`KeepAliveClient`), for
callers whose own time matters (a search service's latency): it costs a fraction of an httpx request per call.
Its answers are read within the same limits as httpx's (:class:`~irflow.tasks.core.http_body.BodyReader`)."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
import urllib.request
from functools import partial
from typing import Any

from irflow.tasks.core.http_body import PIECE, BodyReader, HttpAnswer


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

    def post(self, url: str, *, json: Any, headers: dict[str, str] | None = None, who: str = "") -> HttpAnswer:
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
                content = reader.read(iter(partial(response.read1, PIECE), b""))
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
            return HttpAnswer(response.status, response.headers, content)
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


__all__ = ["KeepAliveClient", "keep_alive_usable"]
