"""The Prefect API a command's flows report to: the configured server, or a temporary one started early.

Without a configured API (``PREFECT_API_URL`` in the environment or the Prefect profile) Prefect
starts a temporary server when the first flow begins, and the flow waits for it: ~5 s on two cores,
2 s of it importing the server code into the client and 3 s of server start-up. ``irflow`` starts
the same temporary server (Prefect's API app under uvicorn with ``PREFECT__SERVER_EPHEMERAL=1``, the
command Prefect's own ephemeral mode runs, on the same database) as soon as the command line is
parsed, in a subprocess, so its start-up overlaps the validation and library imports that follow;
``ready()`` then waits for whatever is left and points Prefect at it. The server is stopped by its
process id when the command ends, after Prefect's log and event workers have flushed into it; if
the command is killed before it can, the server notices its parent is gone and stops itself
(:mod:`irflow.tasks.core.child`), so no server is ever orphaned.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import IO

from irflow.tasks.core.schema import IrflowError

_STARTUP_FAILURE = 3  # uvicorn's exit code when it cannot bind the port or the app fails to start


class PrefectServerError(IrflowError):
    """The temporary Prefect server did not start."""


class TemporaryServer:
    """Prefect's API in a subprocess on a free loopback port, started at construction.

    A thread waits for it to answer and then sends it one API and one database request: the first
    of each costs the server ~0.4 s, better spent while the command is still importing.
    """

    def __init__(self) -> None:
        self._log: IO[bytes] = tempfile.TemporaryFile()
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._failure: str | None = None
        self._stopping = False  # set by stop(): the watcher then returns without reading the closed log
        self._spawn()
        self._started = threading.Thread(target=self._watch_start, name="prefect-server-start", daemon=True)
        self._started.start()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def _spawn(self) -> None:
        from prefect.settings import get_current_settings

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        env = {
            **os.environ,
            **get_current_settings().to_environment_variables(exclude_unset=True),
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
        }
        env.pop("PREFECT_API_URL", None)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "irflow.tasks.core.child",  # dies with this process, also when it is killed (see child.py)
                str(os.getpid()),
                "uvicorn",
                "--factory",
                "prefect.server.api.server:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "error",
                "--lifespan",
                "on",
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            start_new_session=True,
        )

    def _watch_start(self) -> None:
        while True:
            assert self.process is not None
            code = self.process.poll()
            if self._stopping:  # the command ended (an early error) while the server was still starting
                return
            if code == _STARTUP_FAILURE and not _port_free(self.port):  # taken between choosing and binding
                self._spawn()
            elif code is not None:
                self._failure = f"the temporary Prefect server exited with code {code}: {self._output()}"
                return
            elif self._request("/health"):
                self._request("/admin/version")
                self._request("/flows/filter", b"{}")
                return
            time.sleep(0.05)

    def _request(self, path: str, body: bytes | None = None) -> bool:
        request = urllib.request.Request(
            f"{self.api_url}{path}", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status == 200
        except OSError:
            return False

    @property
    def starting(self) -> bool:
        """True until the server answers (or has failed)."""
        return self._started.is_alive()

    def wait(self, timeout: float) -> None:
        """Block until the server answers (and is warm); raise with its output if it cannot start."""
        self._started.join(timeout)
        if self._failure:
            raise PrefectServerError(self._failure)
        if self._started.is_alive():
            raise PrefectServerError(
                f"the temporary Prefect server did not answer within {timeout:.0f} s "
                f"(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS): {self._output()}"
            )

    def _output(self) -> str:
        self._log.seek(0)
        text = self._log.read().decode("utf-8", "replace").strip()
        return text[-2000:] or "(no output)"

    def stop(self) -> None:
        """Terminate the server (its own process group, by id) and wait for it (and for the start watcher)."""
        self._stopping = True
        self._started.join(timeout=15)  # first the watcher (it could still respawn); it returns at its next poll
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


_server: TemporaryServer | None = None
_scope: contextlib.ExitStack | None = None


@contextlib.contextmanager
def prefect_api() -> Iterator[None]:
    """For the duration of a command: start the temporary server now unless an API is configured."""
    global _server, _scope
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        yield
        return
    with contextlib.ExitStack() as scope:
        _server, _scope = TemporaryServer(), scope
        scope.callback(_server.stop)
        try:
            yield
        finally:
            _server = _scope = None


def ready(*preload: str) -> None:
    """Wait for the temporary server (if this command started one) and point Prefect at it.

    While the server is still starting, ``preload`` (libraries the stages may need) is imported, so
    the wait is not wasted; once it answers, nothing more is imported here (a run on warm caches may
    never need them). Idempotent; without a temporary server it does nothing.
    """
    global _scope
    if _server is None or _scope is None:  # no temporary server, or already pointed at it
        _end_crashed_runs()
        return
    import importlib

    for module in preload:
        if not _server.starting:
            break
        importlib.import_module(module)
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        PREFECT_UI_URL,
        temporary_settings,
    )

    _server.wait(float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
    # No UI URL: this server serves none and ends with the command, so "View at ..." links and MLflow's
    # prefect.flow_run_url tag would point nowhere. No heartbeats: they let a lasting server notice a
    # crashed run (and Prefect joins its heartbeat thread at the end of a flow, sleeping in whole seconds).
    _scope.enter_context(
        temporary_settings(
            updates={PREFECT_API_URL: _server.api_url, PREFECT_UI_URL: "", PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
        )
    )
    _scope.enter_context(_environment("PREFECT_API_URL", _server.api_url))  # for Dask workers and other children
    _scope.callback(_drain_prefect_workers)  # runs first on exit: before the settings and the server go
    _scope = None
    _end_crashed_runs()


def _end_crashed_runs() -> None:
    """Flow runs left RUNNING by a killed irflow marked CRASHED, once the API this command uses is known: asked
    any earlier, Prefect's client would start an ephemeral server of its own, which outlives a killed command."""
    from irflow.flows.stages import end_crashed_flow_runs

    end_crashed_flow_runs()


@contextlib.contextmanager
def _environment(key: str, value: str) -> Iterator[None]:
    previous = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = previous


def _drain_prefect_workers() -> None:
    """Send Prefect's queued logs and events while the server still listens."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):
            worker.drain_all(timeout=10)


__all__ = ["PrefectServerError", "TemporaryServer", "prefect_api", "ready"]
