"""The tracking store is proven writable before any stage runs (``tasks/tracking_check.check_tracking``).

Real stores only: SQLite files made unusable in ways that hold for root too (a folder, a database
SQLite itself treats as read-only, a file that is no database, a file where a folder should be),
non-MLflow HTTP servers on 127.0.0.1, and a real ``mlflow server`` behind a proxy that demands
credentials. Every server is bounded in time and stopped by the test.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.cli import irflow
from support.stores import read_only_database

from irflow.tasks.tracking.check import CHECK_TAG
from irflow.tasks.tracking.log import Tracker, TrackingError, check_tracking
from irflow.tasks.tracking.store import client_uri, redact, split_credentials

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-Pa55"


@pytest.fixture(autouse=True)
def _no_mlflow_credentials(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """check_tracking moves URI credentials into the environment: undo that after each test."""
    for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    yield
    for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        os.environ.pop(key, None)


def test_credentials_are_split_from_the_uri_and_redacted() -> None:
    uri = f"https://alice:{SECRET}@mlflow.example.com:8443/base"
    assert redact(uri) == "https://alice:***@mlflow.example.com:8443/base"
    assert split_credentials(uri) == ("https://mlflow.example.com:8443/base", "alice", SECRET)
    assert split_credentials("http://[::1]:5000")[0] == "http://[::1]:5000"
    assert redact("http://bob:p%40ss@[::1]:5000") == "http://bob:***@[::1]:5000"
    assert client_uri(f"postgresql://alice:{SECRET}@db/mlflow") == f"postgresql://alice:{SECRET}@db/mlflow"  # driver's
    assert "MLFLOW_TRACKING_PASSWORD" not in os.environ
    assert client_uri(uri) == "https://mlflow.example.com:8443/base"
    assert (os.environ["MLFLOW_TRACKING_USERNAME"], os.environ["MLFLOW_TRACKING_PASSWORD"]) == ("alice", SECRET)


# ---------------------------------------------------------------------------------------------
# SQLite


def test_a_sqlite_store_is_checked_with_an_idempotent_write(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'new' / 'folder' / 'mlflow.db'}"
    assert check_tracking(uri, experiment="study") == uri
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("study")
    first = experiment.tags[CHECK_TAG]
    check_tracking(uri, experiment="study")  # again: the same experiment, no new one, no runs
    assert [e.name for e in client.search_experiments()] == ["study", "Default"]
    assert not client.search_runs([experiment.experiment_id])
    assert client.get_experiment_by_name("study").tags[CHECK_TAG] >= first
    assert Path(experiment.artifact_location.removeprefix("file://")).is_dir()  # artifacts beside the database


@pytest.mark.parametrize("case", ["read-only database", "folder", "not a database", "file where a folder should be"])
def test_an_unusable_sqlite_store_fails_at_once_naming_it(case: str, tmp_path: Path) -> None:
    path = tmp_path / "mlflow.db"
    expected = "cannot be written"
    if case == "read-only database":
        read_only_database(path)
        expected = "cannot be written: OperationalError: attempt to write a readonly database"
    elif case == "folder":
        path.mkdir()
        expected = "is a folder, not a database file"
    elif case == "not a database":
        path.write_bytes(b"these are not the pages of a database\n" * 200)
        expected = "file is not a database"
    else:
        (tmp_path / "blocker").write_text("a file")
        path = tmp_path / "blocker" / "mlflow.db"
        expected = "cannot create the folder"
    uri = f"sqlite:///{path}"
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(TrackingError) as failure:
        check_tracking(uri, timeout=2)
    assert str(failure.value).startswith(f"MLflow tracking store {uri}") and expected in str(failure.value)
    assert "\n" not in str(failure.value)  # one line, not SQLAlchemy's pages
    assert (path.read_bytes() if path.is_file() else None) == before


def test_a_deleted_experiment_fails_the_check_with_the_way_out(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.delete_experiment(client.create_experiment("gone"))
    with pytest.raises(TrackingError, match=r"experiment 'gone' in .* is deleted: restore it"):
        check_tracking(uri, experiment="gone")  # the run's create_run would fail on it, after the work


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes files whatever their permission bits say")
def test_a_sqlite_file_without_write_permission_fails(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    path = tmp_path / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    path.chmod(0o444)
    with pytest.raises(TrackingError, match="readonly"):
        check_tracking(f"sqlite:///{path}")


# ---------------------------------------------------------------------------------------------
# servers that are not MLflow


class _Handler(http.server.BaseHTTPRequestHandler):
    answer: Callable[[http.server.BaseHTTPRequestHandler], None]

    def do_GET(self) -> None:
        type(self).answer(self)

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass


def _html(handler: http.server.BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html")
    handler.end_headers()
    handler.wfile.write(b"<html><body>a web page, 200 for every path</body></html>")


def _not_found(handler: http.server.BaseHTTPRequestHandler) -> None:
    handler.send_error(404)


def _unauthorized(handler: http.server.BaseHTTPRequestHandler) -> None:
    handler.send_response(401)
    handler.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
    handler.end_headers()


def _never_answers(handler: http.server.BaseHTTPRequestHandler) -> None:
    time.sleep(5)  # longer than the check's timeout; bounded, so the server thread ends


@pytest.fixture
def http_server() -> Iterator[Callable[[Callable[[http.server.BaseHTTPRequestHandler], None]], int]]:
    """Start a small HTTP server on 127.0.0.1 answering with the given function; returns its port."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> int:
        handler = type("Handler", (_Handler,), {"answer": staticmethod(answer)})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        servers.append(server)
        return int(server.server_address[1])

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    "answer, expected",
    [
        (_html, "does not answer like an MLflow tracking server (HTTP 200"),
        (_not_found, "does not answer like an MLflow tracking server (HTTP 404"),
        (_unauthorized, "refused the request (HTTP 401)"),
        (_never_answers, "is unreachable (TimeoutError"),
        (None, "is unreachable (ConnectionRefusedError"),
    ],
    ids=["web page", "404", "401", "no answer", "closed port"],
)
def test_a_server_that_is_not_a_usable_mlflow_fails_at_once_naming_it(
    answer: Callable[[http.server.BaseHTTPRequestHandler], None] | None,
    expected: str,
    http_server: Callable[[Callable[[http.server.BaseHTTPRequestHandler], None]], int],
) -> None:
    port = http_server(answer) if answer else _closed_port()
    uri = f"http://alice:{SECRET}@127.0.0.1:{port}"
    with pytest.raises(TrackingError) as failure:
        check_tracking(uri, timeout=1)
    message = str(failure.value)
    assert f"http://alice:***@127.0.0.1:{port}" in message and expected in message
    assert SECRET not in message


# ---------------------------------------------------------------------------------------------
# a real MLflow server that needs credentials


class _AuthProxy(http.server.BaseHTTPRequestHandler):
    """Forwards to the MLflow server only requests with the right basic credentials (else 401)."""

    upstream = 0
    expected = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()
    seen: list[tuple[str, bool]] = []

    def _forward(self) -> None:
        authorized = self.headers.get("Authorization") == self.expected
        type(self).seen.append((self.path, authorized))
        if not authorized:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization")}
        upstream.request(self.command, self.path, body=body or None, headers=headers)
        response = upstream.getresponse()
        payload = response.read()
        self.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        upstream.close()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def mlflow_behind_credentials(mlflow_server_url: str) -> Iterator[str]:
    """The session's real ``mlflow server`` (SQLite, proxied artifacts, one worker) reachable only through a
    credentials proxy of this test's; yields the proxy's address."""
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AuthProxy)
    proxy.daemon_threads = True
    _AuthProxy.upstream, _AuthProxy.seen = int(mlflow_server_url.rsplit(":", 1)[1]), []
    threading.Thread(target=proxy.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    try:
        yield f"127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.e2e
def test_credentials_in_the_uri_work_and_are_never_shown(mlflow_behind_credentials: str, tmp_path: Path) -> None:
    address = mlflow_behind_credentials
    with pytest.raises(TrackingError) as refused:
        check_tracking(f"http://alice:wrong-{SECRET}@{address}", timeout=5)
    assert f"http://alice:***@{address}" in str(refused.value) and "HTTP 401" in str(refused.value)
    assert SECRET not in str(refused.value) and _AuthProxy.seen and not any(ok for _, ok in _AuthProxy.seen)

    _AuthProxy.seen.clear()
    uri = f"http://alice:{SECRET}@{address}"
    check_tracking(uri, timeout=5, experiment="with-credentials")
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PREFECT_HOME": str(tmp_path / "prefect")}
    done = irflow(
        *("run", "--system", "bm25", "--metric", "nDCG@10", "--latency-runs", "0"),
        *("--experiment", "with-credentials", "--output", str(tmp_path / "out")),
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert SECRET not in done.stdout + done.stderr
    assert len(_AuthProxy.seen) > 10 and all(ok for _, ok in _AuthProxy.seen)  # every request carried them
    tracker = Tracker("with-credentials", uri)
    runs = tracker.search("")
    assert len(runs) == 2  # the evaluation and its system run, logged through the credentials
    stored = [v for r in runs for v in (*r.data.params.values(), *r.data.tags.values())]
    assert stored and not any(SECRET in str(v) for v in stored)
    assert "report.md" in {f.path for f in tracker.client.list_artifacts(runs[-1].info.run_id)} | {
        f.path for f in tracker.client.list_artifacts(runs[0].info.run_id)
    }


def test_a_database_server_that_cannot_be_reached_fails_at_once_with_its_password_hidden() -> None:
    uri = f"postgresql://alice:{SECRET}@127.0.0.1:{_closed_port()}/mlflow"
    with pytest.raises(TrackingError) as failure:
        check_tracking(uri, timeout=5)  # one attempt (no driver here, or a closed port), not MLflow's retries
    assert str(failure.value).startswith(f"MLflow tracking store {redact(uri)} cannot be reached: ")
    assert SECRET not in str(failure.value)
