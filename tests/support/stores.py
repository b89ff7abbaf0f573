"""Tracking stores for tests: unusable in ways that hold for root too, and a real ``mlflow server``."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.services import free_port


def read_only_database(path: Path) -> None:
    """A real MLflow database that SQLite itself opens read-only, whoever asks (root included): byte 18
    of the header, the file format *write* version, set above 2 ("the database must be treated as
    read-only", sqlite.org/fileformat.html)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{path}")
    client.create_experiment("irflow")
    client._tracking_client.store.engine.dispose()  # no pooled connection keeps an old header in memory
    with open(path, "r+b") as fh:
        fh.seek(18)
        fh.write(b"\x03")
    with sqlite3.connect(path) as connection, pytest.raises(sqlite3.OperationalError, match="readonly"):
        connection.execute("CREATE TABLE t (x)")  # the fixture really cannot be written


@contextlib.contextmanager
def mlflow_server(folder: Path, startup_s: float = 180.0) -> Iterator[str]:
    """A real ``mlflow server`` on a free 127.0.0.1 port (SQLite and proxied artifacts in ``folder``, one
    worker); yields its URL. It runs in its own session, stopped by its pid (SIGTERM, then SIGKILL)."""
    port, log_path = free_port(), folder / "mlflow-server.log"
    command = [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}"]
    command += ["--artifacts-destination", str(folder / "artifacts"), "--workers", "1"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.read() == b"OK":
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"mlflow server did not answer within {startup_s:.0f} s:\n{log_path.read_text()}")
            time.sleep(0.5)
        yield url
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
