"""The keep-alive ``http.client`` path of the HTTP layer (``KeepAliveClient``), against a real loopback server:
connections are reused, a connection the server dropped while idle is reopened transparently, retries
and errors go through ``Call`` as with httpx, and a proxy in the environment sends callers to httpx."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from irflow.tasks.core.http_client import Call, HttpCallError, KeepAliveClient, RetryPolicy, keep_alive_usable


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: list[int] = []
    drop_after_answer = False

    def setup(self) -> None:
        super().setup()
        Handler.connections.append(1)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status = 500 if body.get("fail") else 200
        data = json.dumps({"echo": body, "token": self.headers.get("X-Token")}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if Handler.drop_after_answer:  # as a server whose idle timeout expired: no "Connection: close" sent
            self.close_connection = True


@pytest.fixture
def server() -> Iterator[str]:
    Handler.connections, Handler.drop_after_answer = [], False
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/search?x=1"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_connections_are_reused_and_reopened_when_dropped(server: str) -> None:
    client = KeepAliveClient(server, {"Content-Type": "application/json", "X-Token": "t0ken"}, timeout=5)
    call = Call(server, "test service", policy=RetryPolicy(retries=0))
    for i in range(3):
        assert call.post(client, {"query": f"q{i}"}).json == {"echo": {"query": f"q{i}"}, "token": "t0ken"}
    assert len(Handler.connections) == 1  # one keep-alive connection for three requests
    Handler.drop_after_answer = True
    for i in range(3):  # each request finds its connection closed by the server: reopened, no retry needed
        assert call.post(client, {"query": f"é{i}"}).json["echo"] == {"query": f"é{i}"}
    assert len(Handler.connections) == 3  # the first answer came on the old connection, then one new each
    client.close()


def test_server_errors_are_retried_then_reported(server: str) -> None:
    client = KeepAliveClient(server, {"Content-Type": "application/json"}, timeout=5)
    call = Call(server, "test service", policy=RetryPolicy(retries=1, backoff=0.01))
    with pytest.raises(HttpCallError, match="failed 2 times; last: HTTP 500"):
        call.post(client, {"fail": True})
    with pytest.raises(ValueError, match="posts to"):
        client.post("http://elsewhere/", json={})


def test_a_proxy_in_the_environment_means_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert keep_alive_usable("http://search.internal:9200/_search")
    assert not keep_alive_usable("ftp://search.internal/")
    monkeypatch.setenv("http_proxy", "http://proxy:3128")
    assert not keep_alive_usable("http://search.internal:9200/_search")
    monkeypatch.setenv("no_proxy", "search.internal")
    assert keep_alive_usable("http://search.internal:9200/_search")
