"""One rule for credentials in every URL irflow takes (``irflow.tasks.core.urls``): a system's, a judge's,
a generator's, an LLM's or an API embedder's URL with user info is refused, naming the argument and the
environment variable the credential comes from, before anything is written or sent; the tracking URI's
are moved into the environment and never shown. ``Basic`` credentials are redacted as ``Bearer`` ones are."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.cli import irflow
from support.fake_chat import FakeChat

from irflow.tasks.annotate.judges import parse_judge
from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError
from irflow.tasks.core.urls import CredentialsInUrlError, refuse_credentials, split_credentials
from irflow.tasks.embed.api import ApiModel
from irflow.tasks.evalsets.synthesize_llm import make_generator
from irflow.tasks.llm import OpenAIClient
from irflow.tasks.rag.generate import parse_generator
from irflow.tasks.systems.specs import parse_system
from irflow.tasks.tracking.check import check_tracking
from irflow.tasks.tracking.store import TrackingError

SECRET = "S3cretPW-url"
USER = "alice-user"
BASIC = base64.b64encode(f"{USER}:{SECRET}".encode()).decode()


def _url(port: int | str = 9) -> str:
    return f"http://{USER}:{SECRET}@127.0.0.1:{port}/v1"


def _shows_no_credential(text: str) -> None:
    assert SECRET not in text and BASIC not in text and USER not in text


def _files_holding(*folders: Path) -> list[str]:
    found = []
    for folder in folders:
        for path in folder.rglob("*") if folder.exists() else ():
            if path.is_file():
                data = path.read_bytes()
                found += [f"{path} holds {s}" for s in (SECRET, BASIC) if s.encode() in data]
    return found


@pytest.fixture
def chat() -> Iterator[FakeChat]:
    server = FakeChat({})
    yield server
    server.stop()


# --------------------------------------------------------------------------------------------------
# every parser of a URL-bearing spec


def test_the_one_check_names_the_argument_and_the_variable_and_shows_no_credential() -> None:
    assert refuse_credentials("http://127.0.0.1:9/v1", "--judge") == "http://127.0.0.1:9/v1"
    assert refuse_credentials("http://127.0.0.1:8000/x@y", "--judge") == "http://127.0.0.1:8000/x@y"  # @ in a path
    for url in (_url(), f"https://{SECRET}@host/v1", f"http://{USER}@host/v1"):
        with pytest.raises(CredentialsInUrlError) as refused:
            refuse_credentials(url, "--generator", "OPENAI_API_KEY")
        message = str(refused.value)
        assert message.startswith("--generator: a URL must not carry credentials")
        assert "credentials come from the environment: OPENAI_API_KEY" in message and "***@" in message
        _shows_no_credential(message)
        assert isinstance(refused.value, InputError)  # the CLI prints it as a usage error (exit 2)


@pytest.mark.parametrize(
    ("parse", "argument", "variable"),
    [
        (lambda: parse_judge(f"openai:m@{_url()}", "--judge"), "--judge", "OPENAI_API_KEY"),
        (lambda: parse_judge(f"openai(key_env=MY_KEY):m@{_url()}"), "--judge", "MY_KEY"),
        (lambda: parse_judge(f"anthropic(base_url={_url()}):claude", "--judge"), "--judge (base_url)", "ANTHROPIC"),
        (lambda: parse_judge(f"gemini(base_url={_url()}):g", "--llm"), "--llm (base_url)", "GEMINI_API_KEY"),
        (lambda: parse_generator(f"openai(max_retries=0):m@{_url()}"), "--generator", "OPENAI_API_KEY"),
        (lambda: make_generator(f"openai:m@{_url()}"), "--llm", "OPENAI_API_KEY"),
        (lambda: OpenAIClient("m", _url()), "openai:m", "OPENAI_API_KEY"),
        (lambda: parse_system(f"http:{_url()}/search"), "http: system", "auth_env=VARIABLE"),
        (lambda: parse_system(f"dense(base_url={_url()}):openai:te3"), "base_url", "OPENAI_API_KEY"),
    ],
)
def test_every_parser_of_a_url_refuses_credentials(parse, argument: str, variable: str) -> None:
    with pytest.raises(InputError) as refused:
        parse()
    message = str(refused.value)
    assert f"{argument}: a URL must not carry credentials" in message and variable in message
    assert SECRET not in message and BASIC not in message


def test_openai_base_url_from_the_environment_follows_the_same_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", _url())
    for parse, argument in (
        (lambda: parse_judge("openai:m", "--judge"), "--judge (OPENAI_BASE_URL)"),
        (lambda: parse_generator("openai:m"), "--generator (OPENAI_BASE_URL)"),
        (lambda: parse_system("dense:openai:text-embedding-3-small"), "OPENAI_BASE_URL"),
        (lambda: ApiModel.from_spec("openai:te3", (), 8), "OPENAI_BASE_URL"),
    ):
        with pytest.raises(InputError) as refused:
            parse()
        assert f"{argument}: a URL must not carry credentials" in str(refused.value)
        assert SECRET not in str(refused.value)
    parse_judge("openai:m@http://127.0.0.1:9/v1")  # a URL of its own: the variable is not used
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert parse_system("dense:openai:text-embedding-3-small").model == "openai:text-embedding-3-small"


# --------------------------------------------------------------------------------------------------
# the commands: refused before anything is written or sent


def _refused(done, argument: str, tmp_path: Path) -> None:
    """Refused with exit 2, naming ``argument``, and no file under the test's folder, the cache or the MLflow
    store holds the credential."""
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert f"{argument}: a URL must not carry credentials" in output, output[-3000:]
    assert "credentials come from the environment" in output and "Traceback" not in output
    assert SECRET not in output and BASIC not in output
    store = Path(os.environ["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///")).parent
    assert _files_holding(tmp_path, Path(os.environ["IRFLOW_CACHE_DIR"]), store) == []


def test_rag_annotate_and_synthesize_refuse_an_llm_url_with_credentials(chat: FakeChat, tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    llm = f"openai:sim@{_url(chat.url.rsplit(':', 1)[1].split('/')[0])}"
    out = tmp_path / "out"
    done = irflow("rag", "--system", "bm25", "--generator", llm, "--output", str(out), env=env)
    _refused(done, "--generator", tmp_path)
    answers = tmp_path / "a.jsonl"
    answers.write_text(json.dumps({"query_id": "td-q-001", "answer": "x", "contexts": [{"doc_id": "td-doc-0001"}]}))
    done = irflow("rag", "--answers", str(answers), "--judge", llm, "--output", str(out), env=env)
    _refused(done, "--judge", tmp_path)
    done = irflow("annotate", "--dataset", "techdocs", "--judge", llm, "--output", str(out), env=env)
    _refused(done, "--judge", tmp_path)
    done = irflow("datasets", "synthesize", "--dataset", "techdocs", "--name", "synth", "--llm", llm, env=env)
    _refused(done, "--llm", tmp_path)
    assert not out.exists() and chat.requests == 0


def test_run_refuses_a_system_or_embedder_url_with_credentials(tmp_path: Path) -> None:
    env = dict(os.environ)
    out = tmp_path / "run"
    done = irflow("run", "--system", "bm25", "--system", f"http:{_url()}/search", "--output", str(out), env=env)
    _refused(done, "http: system", tmp_path)
    api = "dense:openai:text-embedding-3-small"
    done = irflow("run", "--system", api, "--output", str(out), env={**env, "OPENAI_BASE_URL": _url()})
    _refused(done, "OPENAI_BASE_URL", tmp_path)
    assert not out.exists()


# --------------------------------------------------------------------------------------------------
# Basic credentials: redacted wherever they are echoed; the tracking URI's never shown


def test_basic_credentials_are_redacted_as_bearer_tokens_are(monkeypatch: pytest.MonkeyPatch) -> None:
    echoed = "HTTP 500: {'error': 'logged Basic dTpTM2NyZXQ='}"  # base64 of u:S3cret, echoed by a server
    assert redact(echoed) == "HTTP 500: {'error': 'logged Basic ***'}"
    assert redact(f"Basic {BASIC}, again") == "Basic ***, again"
    for prose in ("a Basic understanding", "Basic information", "Basic abcd", "Basic ***"):
        assert redact(prose) == prose  # not base64 of user:password: left as it is
    # the pair known, its base64 goes wherever it shows, with or without "Basic"
    monkeypatch.setenv("SOME_SERVICE_USERNAME", USER)
    monkeypatch.setenv("SOME_SERVICE_PASSWORD", SECRET)
    assert redact(f"token={BASIC}") == "token=***"
    monkeypatch.delenv("SOME_SERVICE_USERNAME")
    monkeypatch.delenv("SOME_SERVICE_PASSWORD")
    other = base64.b64encode(b"bob:An0therSecret").decode()
    assert split_credentials("https://bob:An0therSecret@mlflow.example.com/x")[0] == "https://mlflow.example.com/x"
    assert redact(f"cookie {other} and An0therSecret") == "cookie *** and ***"  # remembered by split_credentials


class _Echo(BaseHTTPRequestHandler):
    """An MLflow look-alike that answers 500, echoing the request's Authorization header in its body."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"error": f"logged {self.headers.get('Authorization')}"}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_a_tracking_error_body_echoing_the_basic_credential_shows_none_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        port = server.server_address[1]
        with pytest.raises(TrackingError) as failed:
            check_tracking(f"http://{USER}:{SECRET}@127.0.0.1:{port}", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    message = str(failed.value)
    assert "HTTP 500" in message and "Basic ***" in message, message
    assert SECRET not in message and BASIC not in message
