"""Private test/benchmark helper: a real ``chroma run`` server on 127.0.0.1 (a free port, a
temporary folder), started through ``irflow.tasks.core.child`` so that it dies with the process that
started it even when that process is killed, and stopped by its PID.

``python -m irflow.tasks.core.child PID support.chroma run ...`` runs this module as ``__main__``: the
``chroma`` command itself (its entry point has no ``__main__`` block to run).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from support.services import TESTS, free_port

STARTUP_S = 60.0
STOP_S = 15.0


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/api/v2/heartbeat", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def chroma_server(path: Path, port: int | None = None, startup_s: float = STARTUP_S) -> Iterator[str]:
    """Start ``chroma run --host 127.0.0.1 --port PORT --path PATH``; yields its URL; stops it by PID."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    args = ["run", "--host", "127.0.0.1", "--port", str(port), "--path", str(path)]
    log = open(path.parent / f"chroma-{port}.log", "wb")  # closed in finally
    proc = subprocess.Popen(
        [sys.executable, "-m", "irflow.tasks.core.child", str(os.getpid()), "support.chroma", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + startup_s
        while not _answers(url):
            if proc.poll() is not None:
                raise RuntimeError(f"chroma run exited with {proc.returncode}: {_tail(log.name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"chroma run did not answer at {url} within {startup_s:.0f} s: {_tail(log.name)}")
            time.sleep(0.1)
        yield url
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server by its PID, SIGKILL it if it has not exited within :data:`STOP_S`."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(STOP_S)


def _tail(path: str) -> str:
    try:
        return Path(path).read_bytes()[-2000:].decode("utf-8", "replace")
    except OSError:
        return "(no log)"


if __name__ == "__main__":
    from chromadb.cli.cli import app

    sys.exit(app())
