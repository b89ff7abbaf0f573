"""Every HTTP answer is read within a size and a total time limit (issue 35): a service whose body never ends
fails with a named error (``IRFLOW_MAX_RESPONSE_BYTES`` when it streams fast, ``IRFLOW_RESPONSE_SECONDS`` when
it trickles: the request timeout bounds each wait, not the whole body), with memory flat, through every client
the HTTP layer drives (its keep-alive connection, httpx sync and async, an httpx client it only hooks, as
Chroma's; the Anthropic and Gemini LLM clients, which speak their APIs through it). A SIGTERM while a body
trickles in stops the reader at once.

The server and the reader run in a child process under ``RLIMIT_AS`` = 2 GiB (``support.limited``): an unbounded read
of an endless body once took 23.9 GB.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.limited import CHILD, GIB, child_env, in_child, peak_bytes, stop_child

ENDLESS = """
import http.server, threading, time

class Endless(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        piece = b" " * PIECE
        try:
            self.wfile.write(b'6\\r\\n{"a": \\r\\n')
            while True:  # a JSON value that never comes
                self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(piece), piece))
                time.sleep(PAUSE)
        except OSError:
            pass

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
server.daemon_threads = True
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_address[1]}/search"
"""

FAST = "PIECE, PAUSE = 1 << 16, 0.0\n" + ENDLESS
SLOW = "PIECE, PAUSE = 16, 0.05\n" + ENDLESS

CLIENTS = {
    "keep-alive": """
from irflow.tasks.core.http_client import Call, KeepAliveClient, RetryPolicy
Call(url, "test service", policy=RetryPolicy(retries=0)).post(KeepAliveClient(url, {}, timeout=5), {"q": 1})
""",
    "httpx": """
import httpx
from irflow.tasks.core.http_client import Call, RetryPolicy
Call(url, "test service", policy=RetryPolicy(retries=0)).post(httpx.Client(timeout=5), {"q": 1})
""",
    "httpx async": """
import asyncio, httpx
from irflow.tasks.core.http_client import Call, RetryPolicy
asyncio.run(Call(url, "test service", policy=RetryPolicy(retries=0)).apost(httpx.AsyncClient(timeout=5), {"q": 1}))
""",
    "hooked httpx": """
import httpx
from irflow.tasks.core.http_client import bounded_hook
httpx.Client(timeout=5, event_hooks={"response": [bounded_hook("test service")]}).post(url, json={"q": 1})
""",
    "anthropic": """
import asyncio, os
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.llm import make_llm
from irflow.tasks.llm.clients import LLMCallError
os.environ["ANTHROPIC_API_KEY"] = "sk-ant-test"
try:
    asyncio.run(make_llm(f"anthropic(base_url={url},max_retries=0):claude").complete("s", "u"))
except LLMCallError as err:
    raise IrflowError(str(err)) from None
""",
    "gemini": """
import asyncio, os
from irflow.tasks.core.schema import IrflowError
from irflow.tasks.llm import make_llm
from irflow.tasks.llm.clients import LLMCallError
os.environ["GEMINI_API_KEY"] = "gm-test"
try:
    asyncio.run(make_llm(f"gemini(base_url={url},max_retries=0):gemini-2.5-flash").complete("s", "u"))
except LLMCallError as err:
    raise IrflowError(str(err)) from None
""",
    "http: system": """
from support.toy import tiny_dataset
from irflow.tasks.retrieve import retrieve
retrieve(tiny_dataset(), f"http(load=none,concurrency=2,retries=0):{url}", depth=10)
""",
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_an_endless_fast_body_stops_at_the_byte_limit(client: str) -> None:
    done = in_child(FAST + CLIENTS[client], timeout=120, env=child_env(IRFLOW_MAX_RESPONSE_BYTES="8M"))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "answered a body too large: more than 8,388,608 bytes (IRFLOW_MAX_RESPONSE_BYTES" in done.stderr
    assert "/search" in done.stderr.split("irflow: error:", 1)[1]  # the error names the service
    assert peak_bytes(done) < GIB


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_trickling_body_stops_at_the_time_limit(client: str) -> None:
    """16 bytes every 50 ms: each wait is far below the request timeout, so only the total time limit ends it."""
    done = in_child(SLOW + CLIENTS[client], timeout=120, env=child_env(IRFLOW_RESPONSE_SECONDS="2"))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "was still sending its answer" in done.stderr
    assert "more than 2 seconds (IRFLOW_RESPONSE_SECONDS; raise it to allow more)" in done.stderr
    assert peak_bytes(done) < GIB


STOPPED = """
import signal, sys, threading
from irflow.tasks.core.stop import Terminated, terminate
signal.signal(signal.SIGTERM, terminate)
print("reading", flush=True)
try:
    exec(CLIENT)
except Terminated:
    print("stopped", flush=True)
    sys.exit(143)
"""


@pytest.mark.parametrize("client", ["keep-alive", "http: system"])
def test_sigterm_stops_a_reader_of_an_endless_body(client: str) -> None:
    """The time limit is 10 minutes here: only the stop can end the child before the safety timeout."""
    code = SLOW + f"CLIENT = {CLIENTS[client]!r}\n" + STOPPED
    env = child_env(IRFLOW_RESPONSE_SECONDS="600")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, code, str(2 * GIB)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert child.stdout is not None and child.stdout.readline() == b"reading\n"
    time.sleep(1)  # the body is trickling in (20 pieces by now)
    assert child.poll() is None
    out, err = stop_child(child, signal.SIGTERM)
    assert child.returncode == 143, err.decode()[-3000:]
    assert b"stopped" in out


@pytest.mark.e2e
def test_sigterm_stops_irflow_run_while_a_service_body_trickles_in(tmp_path: Path) -> None:
    """The command as typed (reporting to the session's Prefect server, no tracking), under 8 GB of address space:
    the service's answer never ends and the time limit is 10 minutes, so only the stop can end it before the
    safety net. (A stop with the command's own temporary server: tests/flows/test_prefect_api.py.)"""
    import resource
    import threading

    requested = threading.Event()
    namespace: dict[str, Any] = {"PIECE": 16, "PAUSE": 0.05, "REQUESTED": requested}
    exec(ENDLESS.replace("def do_POST(self):\n", "def do_POST(self):\n        REQUESTED.set()\n"), namespace)
    server = namespace["server"]
    env = child_env(
        IRFLOW_RESPONSE_SECONDS="600",
        IRFLOW_CACHE_DIR=str(tmp_path / "cache"),
        PREFECT_HOME=str(tmp_path / "prefect"),
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
    )
    system = f"http(load=none,concurrency=2):{namespace['url']}"
    command = [sys.executable, "-m", "irflow.cli", "run", "--dataset", "techdocs", "--system", system, "--no-track"]
    run = subprocess.Popen(
        [*command, "--output", str(tmp_path / "out")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (8_000_000_000, 8_000_000_000)),
    )
    try:
        assert requested.wait(300), "irflow never asked the service"
        time.sleep(1)  # the body is trickling in (20 pieces by now)
        assert run.poll() is None
        _, err = stop_child(run, signal.SIGTERM)
    finally:
        server.shutdown()
    assert run.returncode == 143, err.decode()[-3000:]
    assert b"Traceback" not in err
