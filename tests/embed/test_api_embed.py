"""``dense:openai:<model>``: an OpenAI-compatible embeddings server (on 127.0.0.1, in a thread of the test
process) that embeds with the real all-MiniLM-L6-v2 gives the numbers of ``dense:minilm``; a rerun
sends no request; the key is found nowhere; costs before (``--dry-run``) and after the run. Plus the
shared HTTP client layer's retries, refusals, limits and redaction against a scripted server."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.cli import irflow
from support.embeddings import EmbeddingService

from irflow.tasks.core.http_client import (
    Call,
    HttpAuthError,
    HttpCallError,
    RateLimiter,
    RetryPolicy,
    retry_after_seconds,
)
from irflow.tasks.embed.api import ApiModel, EmbeddingApiError, count_tokens
from irflow.tasks.systems.specs import parse_system

KEY = "sk-test-8c1e0b7f-never-print-me"
MEASURES = ["nDCG@10", "R@100"]


@contextmanager
def embedding_service(log: Path) -> Iterator[str]:
    """Serve tests/support/embeddings.py from a thread; yields its base URL; stops it on leaving."""
    with EmbeddingService(str(log), KEY) as service:
        yield service.url


def requests(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.e2e
def test_an_embedding_api_gives_the_local_models_numbers_once_and_never_shows_the_key(tmp_path: Path) -> None:
    """End to end through ``irflow run``: dense:openai over the server equals dense:minilm (same vectors);
    the dry run prices what is not cached; a rerun sends 0 requests; the key echoed by a leaky gateway is
    in no output, log or MLflow store; calls, tokens and USD reach metrics.json, the report and MLflow."""
    env = {
        **os.environ,
        "IRFLOW_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}",
        "OPENAI_API_KEY": KEY,
    }
    log = tmp_path / "requests.jsonl"
    metrics = [x for m in MEASURES for x in ("--metric", m)]
    with embedding_service(log) as url:
        env["OPENAI_BASE_URL"] = f"{url}/v1"
        api = "dense(batch_size=16,price=0.02):openai:all-MiniLM-L6-v2"
        leaky = f"dense(base_url={url}/leaky/v1,concurrency=1):openai:all-MiniLM-L6-v2"

        plan = irflow("run", "--system", api, "--dry-run", env=env)
        assert plan.returncode == 0, plan.stderr[-2000:]
        first = plan.stdout
        assert "0 cached" in first and "calls" in first and "$" in first and "nothing was sent" in first
        assert requests(log) == []

        out = tmp_path / "out"
        args = ["run", "--system", "dense:minilm", "--system", api, "--system", leaky, "--latency-runs", "1"]
        done = irflow(*args, *metrics, "--output", str(out), env=env)
        assert done.returncode != 0 and "1 of 3 systems failed" in done.stderr, done.stderr[-3000:]
        sent = requests(log)
        assert sent[0]["status"] == 429 and sent[1]["status"] == 200  # retried after Retry-After: 0
        assert max(r["inputs"] for r in sent if r["path"] == "/v1/embeddings") <= 16
        refused = [r["status"] for r in sent if r["path"].startswith("/leaky")]
        assert refused == [400]  # a wrong request is neither retried nor followed by the other batches

        document = json.loads((out / "metrics.json").read_text())
        local, remote = (
            document["systems"][str(parse_system("dense:minilm"))],
            document["systems"][str(parse_system(api))],
        )
        assert remote["nDCG@10"] == pytest.approx(local["nDCG@10"], abs=0.002)
        assert remote["R@100"] == pytest.approx(local["R@100"], abs=0.002)
        cost = document["cost"][str(parse_system(api))]
        answered = sum(1 for r in sent if r["status"] == 200 and r["path"] == "/v1/embeddings")
        assert cost["api_calls"] + cost["latency_api_calls"] == answered  # corpus, queries, latency stage
        assert cost["api_tokens"] > 0 and cost["api_cost_usd"] == pytest.approx(cost["api_tokens"] * 0.02 / 1e6)
        assert cost["latency_api_calls"] > 0
        assert "***" in document["failed"][str(parse_system(leaky))]
        assert "API calls" in (out / "report.md").read_text()

        before = len(requests(log))
        again = irflow(
            "run", "--system", api, *metrics, "--latency-runs", "0", "--output", str(tmp_path / "again"), env=env
        )
        assert again.returncode == 0, again.stderr[-3000:]
        assert len(requests(log)) == before  # every vector came from the cache
        rerun = json.loads((tmp_path / "again" / "metrics.json").read_text())
        assert rerun["systems"][str(parse_system(api))] == document["systems"][str(parse_system(api))]
        assert rerun["cost"][str(parse_system(api))]["api_calls"] == 0
        cached = irflow("run", "--system", api, "--dry-run", env=env)
        assert "0 calls, 0 tokens" in cached.stdout, cached.stdout

    import sqlite3

    db = sqlite3.connect(tmp_path / "mlruns" / "mlflow.db")
    keys = {k for (k,) in db.execute("select key from metrics")}
    db.close()
    assert {"api_calls", "api_tokens", "api_cost_usd"} <= keys
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    outputs = plan.stdout + plan.stderr + done.stdout + done.stderr + again.stdout + again.stderr
    assert leaks == [] and KEY not in outputs


def test_a_refused_key_stops_at_the_first_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "requests.jsonl"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong-key-1234")
    with embedding_service(log) as url:
        model = ApiModel("all-MiniLM-L6-v2", base_url=f"{url}/v1", batch_size=2, concurrency=1)
        with pytest.raises(HttpAuthError, match=r"refused the credentials: HTTP 401.*check OPENAI_API_KEY") as info:
            model.encode([f"text {i}" for i in range(20)])
    assert "sk-wrong-key-1234" not in str(info.value) and "***" in str(info.value)
    assert [r["status"] for r in requests(log)] == [401]


# --- the client layer and the API model against a scripted server, in process -------------------------------


class Scripted:
    """A server on 127.0.0.1 answering each POST with the next scripted (status, body, headers)."""

    def __init__(self, script: list[tuple[int, object, dict[str, str]]]) -> None:
        self.script, self.bodies = list(script), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status, body, headers = outer.script.pop(0) if outer.script else (500, {"error": "script over"}, {})
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Scripted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


FAST = RetryPolicy(retries=2, backoff=0.01, max_backoff=0.02, max_retry_after=5)


def test_the_client_retries_429_and_5xx_then_gives_up_and_redacts() -> None:
    secret = "tok-abcdef-123"
    with Scripted([(429, "busy", {"Retry-After": "0"}), (503, f"down {secret}", {}), (200, {"ok": 1}, {})]) as s:
        with httpx.Client() as client:
            reply = Call(s.url, "test", (secret,), FAST).post(client, {"x": 1})
    assert reply == ({"ok": 1}, 3)
    with Scripted([(500, f"echo {secret}", {})] * 3) as s, httpx.Client() as client:
        with pytest.raises(HttpCallError, match=r"failed 3 times; last: HTTP 500: 'echo \*\*\*'") as info:
            Call(s.url, "test", (secret,), FAST).post(client, {})
    assert secret not in str(info.value) and info.value.attempts == 3
    with Scripted([(400, "bad field", {}), (200, {}, {})]) as s, httpx.Client() as client:
        with pytest.raises(HttpCallError, match="answered HTTP 400") as info:
            Call(s.url, "test", (), FAST).post(client, {})
        assert len(s.bodies) == 1  # a wrong request is not retried
    with Scripted([(429, "", {"Retry-After": "3600"})]) as s, httpx.Client() as client:
        with pytest.raises(HttpCallError, match="asks to retry after 3600 s"):
            Call(s.url, "test", (), FAST).post(client, {})
    with Scripted([(200, "not json", {})]) as s, httpx.Client() as client:
        with pytest.raises(HttpCallError, match="the answer is not JSON"):
            Call(s.url, "test", (), FAST).post(client, {})


def test_retry_after_reads_seconds_and_dates() -> None:
    assert retry_after_seconds("2.5") == 2.5 and retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None and retry_after_seconds("-3") == 0.0
    date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= retry_after_seconds(date) <= 31  # type: ignore[operator]


@pytest.mark.e2e
def test_the_rate_limiter_holds_requests_and_tokens_per_minute() -> None:
    limiter = RateLimiter(rpm=120)  # 2 per second after a burst of 120
    waits = [limiter.reserve() for _ in range(124)]
    assert waits[:120] == [0.0] * 120 and 1.4 < waits[122] <= 1.51 and waits[121] < waits[122] < waits[123]
    tokens = RateLimiter(tpm=6000)  # 100 tokens per second
    assert tokens.reserve(6000) == 0.0 and 0.9 < tokens.reserve(100) <= 1.01
    assert RateLimiter().reserve(10**9) == 0.0
    with pytest.raises(ValueError, match="rpm must be a positive"):
        RateLimiter(rpm=0)


def test_batches_respect_texts_and_tokens() -> None:
    model = ApiModel("m", batch_size=3, batch_tokens=10)
    assert model.batches([4, 4, 4, 1, 1, 1, 1, 20, 2]) == [
        range(0, 2),
        range(2, 5),
        range(5, 7),
        range(7, 8),
        range(8, 9),
    ]
    tokens, method = count_tokens(["abcd", "abcde", "", "é"], "text-embedding-3-small")
    assert method.startswith(("tiktoken:", "estimate:"))
    if method.startswith("estimate:"):
        assert tokens == [1, 2, 1, 1]


def vectors_answer(rows: list[list[float]], encoding: str = "float") -> dict:
    import base64

    def item(i: int, row: list[float]) -> object:
        return base64.b64encode(np.asarray(row, "<f4").tobytes()).decode() if encoding == "base64" else row

    return {"data": [{"index": i, "embedding": item(i, r)} for i, r in enumerate(rows)], "usage": {"prompt_tokens": 7}}


def test_answers_are_checked_and_normalised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    good = vectors_answer([[3, 4], [0, 2]], "base64")
    with Scripted([(200, good, {})]) as s:
        model = ApiModel("m", base_url=s.url, dimensions=2)
        matrix = model.encode(["a", ""], prompt="q: ")
        assert s.bodies[0] == {"model": "m", "input": ["q: a", "q: "], "encoding_format": "base64", "dimensions": 2}
    np.testing.assert_allclose(matrix, [[0.6, 0.8], [0.0, 1.0]], rtol=1e-6)
    assert model.usage.snapshot() == (1, 1, 7)
    bad = {
        "expected 2 embeddings, got 1": {"data": [{"index": 0, "embedding": [1.0, 0.0]}]},
        "bad or repeated index": {"data": [{"index": 0, "embedding": [1.0, 0.0]}] * 2},
        r"vector lengths \[3\] \(2 asked\)": vectors_answer([[1, 0, 0], [0, 1, 0]]),
        "non-finite or all-zero": vectors_answer([[0, 0], [1, 1]]),
        "is not base64 float32": {"data": [{"index": 0, "embedding": "%%"}, {"index": 1, "embedding": "%%"}]},
    }
    for problem, answer in bad.items():
        with Scripted([(200, answer, {})]) as s, pytest.raises(EmbeddingApiError, match=problem):
            ApiModel("m", base_url=s.url, dimensions=2).encode(["a", "b"])


def test_api_specs_identity_and_price(monkeypatch: pytest.MonkeyPatch) -> None:
    from irflow.tasks.embed.vectors import model_for

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    spec = parse_system("dense(dimensions=256,rpm=500,concurrency=8):openai:text-embedding-3-small")
    model = model_for(spec)  # type: ignore[arg-type]
    assert isinstance(model, ApiModel)
    assert model.identity == "openai:text-embedding-3-small@https://api.openai.com/v1#dimensions=256"
    assert model.price_per_1m == 0.02 and model.rpm == 500 and model.concurrency == 8
    limits = model_for(parse_system("dense(dimensions=256,tpm=9000):openai:text-embedding-3-small"))  # type: ignore[arg-type]
    assert limits.identity == model.identity  # limits change no vector: the same cache entry
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/")
    local = model_for(parse_system("dense:openai:text-embedding-3-small"))  # type: ignore[arg-type]
    assert isinstance(local, ApiModel)
    assert local.identity == "openai:text-embedding-3-small@http://127.0.0.1:9/v1" and local.price_per_1m is None
    assert local.key() is None  # a local server needs no key
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    from irflow.tasks.core.schema import InputError
    from irflow.tasks.experiment import check_models

    with pytest.raises(InputError, match="set the API key in the environment variable OPENAI_API_KEY"):
        check_models(["hybrid:bm25+dense:openai:text-embedding-3-small"])
