"""Nothing leaks: the one redaction (``irflow.tasks.core.redact``) in messages, the CLI's error printer and
logs, and the tracking-store check, whose credentials never follow a redirect to another host (two real
servers on 127.0.0.1: P answers 302 to Q, which records the headers it receives)."""

from __future__ import annotations

import argparse
import base64
import importlib
import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from irflow.cli.terminal import LogFormatter
from irflow.tasks.core.redact import redact, redact_data, remember
from irflow.tasks.core.schema import InputError, IrflowError
from irflow.tasks.systems.specs import parse_system
from irflow.tasks.tracking.check import check_tracking
from irflow.tasks.tracking.store import TrackingError

cli_main = importlib.import_module("irflow.cli.main")  # the module (irflow.cli.main is also the function's name)
PASSWORD = "S3cretPW"
TOKEN = "tok-DO-NOT-LEAK-31415926"
KEY = "sk-test-redact-DO-NOT-LEAK-2718"


def leaks(folder: Path, text: str, *secrets: str) -> list[str]:
    """Where any of ``secrets`` (or the Basic credential of ``alice:PASSWORD``) shows: ``text`` or a file."""
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    found = [f"output holds {s!r}" for s in (*secrets, basic) if s in text]
    for path in folder.rglob("*"):
        if path.is_file():
            content = path.read_bytes().decode("utf-8", "replace")
            found += [f"{path} holds {s!r}" for s in (*secrets, basic) if s in content]
    return found


# --------------------------------------------------------------------------------------------------
# the redaction itself


def test_url_passwords_tokens_and_echoed_headers_show_as_stars() -> None:
    assert redact("http://bob:p%40ss@[::1]:5000/x") == "http://bob:***@[::1]:5000/x"
    assert redact(f"at http://alice:{PASSWORD}@127.0.0.1:9/ now") == "at http://alice:***@127.0.0.1:9/ now"
    assert redact("http://u:p@ss@host/x") == "http://u:***@host/x"  # an unquoted @ in the password
    assert redact(f'{{"Authorization": "Bearer {TOKEN}"}}') == '{"Authorization": "Bearer ***"}'
    assert redact("Authorization: Basic YWxpY2U6UzNjcmV0UFc=") == "Authorization: Basic ***"
    assert redact(f"my key is Bearer {KEY}") == "my key is Bearer ***"
    # what is no secret stays as it is
    for text in ("http://127.0.0.1:8000/x@y", "a Basic understanding", "user@host.example", "https://host:443/a"):
        assert redact(text) == text


def test_secrets_of_the_environment_and_remembered_ones_are_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_PROVIDER_API_KEY", KEY)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
    monkeypatch.setenv("FEATURE_TOKEN", "true")  # a flag, not a secret: "true" stays readable
    monkeypatch.setenv("MY_LLM", "custom-key-named-by-key-env")  # no secret by its name ...
    assert redact(f"key {KEY}, token {TOKEN}: true") == "key ***, token ***: true"
    assert redact("custom-key-named-by-key-env") == "custom-key-named-by-key-env"
    remember("custom-key-named-by-key-env", None, "ab")  # ... until the code that read it remembers it
    assert redact("echo custom-key-named-by-key-env") == "echo ***"
    assert redact("ab cd", ["cd"]) == "ab cd"  # under 4 characters: not treated as a secret
    assert redact_data({"a": [f"x {KEY}", 1, None], "b": (TOKEN,)}) == {"a": ["x ***", 1, None], "b": ("***",)}


# --------------------------------------------------------------------------------------------------
# messages: spec refusals, the CLI's printer, log lines


def test_a_refused_spec_shows_its_url_without_the_password(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    spec = f"http(load=none):http://u:{PASSWORD}@127.0.0.1:9/search"
    with pytest.raises(InputError, match=r"a URL must not carry credentials") as refused:
        parse_system(spec)
    assert "http://u:***@127.0.0.1:9/search" in str(refused.value) and PASSWORD not in str(refused.value)
    dense = "dense(base_url=http://u:pw@127.0.0.1:9/v1):openai:text-embedding-3-small"
    with pytest.raises(InputError, match=r"base_url: a URL must not carry credentials") as refused:
        parse_system(dense)
    assert "http://u:***@127.0.0.1:9/v1" in str(refused.value) and ":pw@" not in str(refused.value)
    # the command as a user runs it: exit code 2, the message redacted
    assert cli_main.main(["run", "--dry-run", "--system", spec]) == 2
    out, err = capfd.readouterr()
    assert "irflow: error: --system: system spec 'http(load=none):http://u:***@127.0.0.1:9/search'" in err
    assert leaks(tmp_path, out + err, PASSWORD) == []


def test_the_cli_error_printer_is_the_last_line_of_defence(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)

    def fails(args: argparse.Namespace) -> int:
        raise IrflowError(f"the server said: invalid key {KEY} for http://alice:{PASSWORD}@127.0.0.1:9/")

    parser = argparse.ArgumentParser(prog="irflow")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.set_defaults(func=fails)
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    assert cli_main.main([]) == 2
    out, err = capfd.readouterr()
    assert "irflow: error: the server said: invalid key *** for http://alice:***@127.0.0.1:9/" in err
    assert leaks(tmp_path, out + err, KEY, PASSWORD) == []


def test_log_lines_are_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    record = logging.LogRecord("irflow.x", logging.WARNING, __file__, 1, "judge said %s", (f"Bearer {KEY}",), None)
    line = LogFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert line == "WARNING irflow.x: judge said Bearer ***"


# --------------------------------------------------------------------------------------------------
# the tracking-store check and redirects


class _Recorder(BaseHTTPRequestHandler):
    """Records each request's path and headers; with ``redirect`` (a class attribute) answers 302 to
    ``REDIRECT/moved/PATH``; else (and at ``/moved/``) like an MLflow server without the experiment."""

    seen: list[tuple[str, dict[str, str]]]
    redirect: str | None = None

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        self.seen.append((self.path, dict(self.headers)))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.redirect is not None and not self.path.startswith("/moved/"):
            self.send_response(302)
            self.send_header("Location", f"{self.redirect}/moved{self.path}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST"} if "get-by-name" in self.path else {}).encode()
        self.send_response(404 if "get-by-name" in self.path else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


def _serve(redirect: str | None) -> tuple[ThreadingHTTPServer, list[tuple[str, dict[str, str]]]]:
    seen: list[tuple[str, dict[str, str]]] = []
    handler = type("Handler", (_Recorder,), {"seen": seen, "redirect": redirect})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, seen


@pytest.fixture
def redirected() -> Iterator[tuple[int, list, list]]:
    """P (a port) answering 302 to ``localhost:Q``; Q answering like an MLflow server; what each saw."""
    q, q_seen = _serve(None)
    p, p_seen = _serve(f"http://localhost:{q.server_address[1]}")
    yield p.server_address[1], p_seen, q_seen
    for server in (p, q):
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("credential", ["password", "token"])
def test_the_tracking_check_sends_no_credential_across_a_redirect_to_another_host(
    credential: str,
    redirected: tuple[int, list, list],
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    port, p_seen, q_seen = redirected
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    if credential == "password":
        uri, sent = f"http://alice:{PASSWORD}@127.0.0.1:{port}", "Basic "
    else:
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)
        uri, sent = f"http://127.0.0.1:{port}", f"Bearer {TOKEN}"
    with caplog.at_level("DEBUG"):
        try:
            check_tracking(uri, timeout=5)
        except TrackingError as err:  # whatever Q makes of it: the message shows no credential either
            print(err)
    assert p_seen and all(headers.get("Authorization", "").startswith(sent) for _, headers in p_seen)
    assert q_seen, "the check followed the redirect to Q"
    assert [h for _, h in q_seen if "Authorization" in h] == [], "a credential crossed to another host"
    out, err = capfd.readouterr()
    assert leaks(tmp_path, out + err + caplog.text, PASSWORD, TOKEN) == []


def test_the_tracking_check_keeps_its_credentials_on_a_redirect_to_the_same_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    server, seen = _serve(None)
    port = server.server_address[1]
    server.RequestHandlerClass.redirect = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
    try:
        check_tracking(f"http://alice:{PASSWORD}@127.0.0.1:{port}", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    moved = [headers for path, headers in seen if path.startswith("/moved/")]
    assert moved and all(h.get("Authorization", "").startswith("Basic ") for h in moved)
