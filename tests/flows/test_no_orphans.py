"""A killed command leaves no server behind: the temporary Prefect server of ``irflow run`` stops
when its command is stopped with SIGTERM or killed with SIGKILL (no clean-up code runs then)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the process tree from /proc"),
]


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found |= {int(c) for c in task.read_text().split()}
    return found


def _servers(pid: int) -> set[int]:
    """The children of ``pid`` that run the Prefect server: a child caught between its fork and its exec still
    shows its parent's command line, so it is not counted until it is uvicorn."""
    found = set()
    for child in _children(pid):
        try:
            if "uvicorn" in Path(f"/proc/{child}/cmdline").read_text():
                found.add(child)
        except OSError:  # gone meanwhile
            continue
    return found


def _alive(pid: int) -> bool:
    """Running, and not a zombie left for a PID 1 that does not reap (as in some containers)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_for(what: str, check, timeout: float) -> object:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_stopped_run_leaves_no_prefect_server(stop: signal.Signals, tmp_path: Path) -> None:
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    command = [sys.executable, "-c", "from irflow.cli.main import entry_point; entry_point()"]
    run = subprocess.Popen(
        [*command, "run", "--system", "bm25", "--latency-runs", "0", "--output", str(tmp_path / "out")],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        servers = _wait_for("the temporary Prefect server", lambda: _servers(run.pid), 60)
        assert isinstance(servers, set)
        (server,) = servers
        run.send_signal(stop)
        run.wait(timeout=60)
        _wait_for(f"server {server} to stop after {stop.name} of its command", lambda: not _alive(server), 30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    if stop == signal.SIGTERM:
        assert run.returncode == 143 and b"Traceback" not in (run.stderr.read() if run.stderr else b"")
