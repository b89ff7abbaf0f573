"""The loopback fake services the tests talk to, on one base: a :class:`Service` binds 127.0.0.1 on a free
port, answers JSON requests through :meth:`Service.handle`, counts and logs them, checks an optional bearer
key, and starts and stops within bounded times, in a thread of the test process (:meth:`Service.start`,
``with Service(...) as service``) or as a child process (:meth:`Service.main` in a script, which prints its
port on the first line of stdout; :func:`script_server` starts one by module name and stops it by its PID).

Thin subclasses speak one API each: :class:`ChatService` (OpenAI-compatible ``/v1/chat/completions``) here;
the embeddings, search and vector-database services in their own modules of this package.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]  # on sys.path: ``support.*`` imports from here
STARTUP_S = 60.0  # a child service prints its port within this (a model to load included)
STOP_S = 10.0  # after SIGTERM, then SIGKILL


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (for servers that take a port, not 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Request:
    """One request as a service sees it: path, headers (case-insensitive, as received), JSON body (``{}``
    when empty)."""

    path: str
    headers: Message
    body: Any

    @property
    def auth(self) -> str:
        """The ``Authorization`` header ("" when absent)."""
        return self.headers.get("Authorization", "")


Reply = tuple[int, object, dict[str, str]]  # status, JSON body, extra headers


def reply(status: int, body: object, headers: dict[str, str] | None = None) -> Reply:
    return status, body, headers or {}


class JsonHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive as a real service, quiet, JSON in and out; every POST goes to the server's
    :class:`Service`."""

    protocol_version = "HTTP/1.1"  # keep-alive, as a real service
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stall)
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def read_json(self) -> Any:
        """The request body as JSON (``{}`` when empty)."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def send_json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        """Answer ``status`` with ``body`` as JSON and any extra ``headers``."""
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in {**(headers or {}), "Content-Type": "application/json"}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        service = self.server.service
        request = Request(self.path, self.headers, self.read_json())
        with service.lock:
            service.requests += 1
        status, body, headers = service.handle(request)
        try:
            self.send_json(status, body, headers)
        except OSError:  # the client went away (killed while this request hung)
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    service: Service


class Service:
    """A fake service on 127.0.0.1: subclasses implement :meth:`handle`. ``token``: requests without
    ``Authorization: Bearer TOKEN`` are refused where the subclass asks :meth:`authorised`; ``log``: a file
    that :meth:`note` appends a JSON line (or :meth:`note_line` a text line) to, as tests read it."""

    def __init__(self, *, token: str | None = None, log: str | Path | None = None) -> None:
        self.token = token
        self.log = Path(log) if log else None
        self.lock = threading.Lock()
        self.requests = 0  # every POST received
        self.server: _Server | None = None
        self.thread: threading.Thread | None = None

    # -- what a subclass writes

    def handle(self, request: Request) -> Reply:
        return reply(404, {"error": f"no route {request.path}"})

    def authorised(self, request: Request) -> bool:
        return self.token is None or request.auth == f"Bearer {self.token}"

    def note(self, **fields: object) -> None:
        """Append one JSON line to the log."""
        self.note_line(json.dumps(fields))

    def note_line(self, line: str) -> None:
        if self.log is not None:
            with self.lock, open(self.log, "a", encoding="utf-8") as out:
                out.write(line + "\n")

    # -- where it runs

    def _bind(self) -> _Server:
        self.server = _Server(("127.0.0.1", 0), JsonHandler)
        self.server.service = self
        return self.server

    @property
    def port(self) -> int:
        assert self.server is not None, "not started"
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Service:
        """Serve in a daemon thread of this process; :meth:`stop` ends it."""
        server = self._bind()
        self.thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.thread is not None:
            self.thread.join(STOP_S)

    def __enter__(self) -> Service:
        return self.start() if self.server is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def main(self) -> None:
        """Serve in this process (a child started by :func:`script_server`): the port first on stdout."""
        server = self._bind()
        print(self.port, flush=True)
        server.serve_forever(poll_interval=0.1)


class ChatService(Service):
    """An OpenAI-compatible ``/v1/chat/completions``: 404 elsewhere, 401 without the bearer key (when
    ``token`` is set; ``refusal`` is the error message, which may echo the header as some gateways do);
    subclasses answer in :meth:`chat`."""

    def refusal(self, request: Request) -> str:
        return "Incorrect API key provided"

    def handle(self, request: Request) -> Reply:
        if request.path != "/v1/chat/completions":
            return reply(404, {"error": "not found"})
        if not self.authorised(request):
            self.refused(request)
            return reply(401, {"error": {"message": self.refusal(request)}})
        return self.chat(request)

    def refused(self, request: Request) -> None:
        """Note a refused request (the scripted services log ``{"status": 401}``)."""

    def chat(self, request: Request) -> Reply:
        raise NotImplementedError


def completion(content: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A chat completion's body holding ``content`` (and ``usage`` when given)."""
    body: dict[str, Any] = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    return body if usage is None else {**body, "usage": usage}


@contextmanager
def script_server(module: str, *args: str, env: dict[str, str] | None = None) -> Iterator[int]:
    """Start ``python -m MODULE ARGS`` (a service of this package, ``support.…``: its :meth:`Service.main`
    prints its port first) with this folder on its path; yield the port, read within :data:`STARTUP_S`;
    stop it by its PID (terminate, then kill after :data:`STOP_S`)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as ready:
            ready.register(proc.stdout, selectors.EVENT_READ)
            if not ready.select(STARTUP_S):
                raise RuntimeError(f"{module} printed no port within {STARTUP_S:.0f} s")
        line = proc.stdout.readline()
        if not line.strip():
            raise RuntimeError(f"{module} exited with {proc.wait(STOP_S)} before printing its port")
        yield int(line)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_S)
