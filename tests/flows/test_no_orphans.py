"""A killed command leaves no server behind: the temporary Prefect server of ``irflow run`` stops
when its command is stopped with SIGTERM or killed with SIGKILL (no clean-up code runs then); and no flow
run behind: one a SIGKILL left RUNNING on a lasting server is marked CRASHED by the next command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from support.prefect_home import seeded_home

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
    env = {**os.environ, "PREFECT_HOME": str(seeded_home(tmp_path / "prefect"))}
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


def test_a_flow_run_left_running_by_a_killed_command_is_marked_crashed_by_the_next(tmp_path: Path) -> None:
    """``irflow run`` reports to the session's Prefect API (a lasting server, as ``PREFECT_API_URL`` names one)
    and waits on an ``http:`` service that never answers; SIGKILLed there, nothing ends its flow run, which
    stays RUNNING. The next command that talks to that API (``irflow abtest``, in this process) marks it
    CRASHED, naming the process; runs of living processes are left alone."""
    import threading

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
    from support.abtest import simulate_log
    from support.cli import irflow

    from irflow.tasks.core.atomic import this_process

    requested, release = threading.Event(), threading.Event()

    class Silent(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            requested.set()
            release.wait(120)  # never answers while the test needs it

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Silent)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    system = f"http(load=none,concurrency=1,retries=0):http://127.0.0.1:{server.server_address[1]}/search"
    command = [sys.executable, "-c", "from irflow.cli.main import entry_point; entry_point()"]
    run = subprocess.Popen(
        [*command, "run", "--dataset", "techdocs", "--system", system, "--no-track", "--latency-runs", "0"],
        env={**os.environ, "IRFLOW_RESPONSE_SECONDS": "600"},
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def flow_runs() -> list:  # type: ignore[type-arg]
        tag = FlowRunFilter(tags=FlowRunFilterTags(all_=[f"irflow.pid:{run.pid}"]))
        with get_client(sync_client=True) as client:
            return client.read_flow_runs(flow_run_filter=tag)

    try:
        assert requested.wait(300), run.stderr.read().decode()[-3000:] if run.poll() is not None and run.stderr else ""
        (flow_run,) = flow_runs()
        assert flow_run.state is not None and flow_run.state.type.value == "RUNNING"
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        release.set()
        server.shutdown()
        server.server_close()
    (left,) = flow_runs()
    assert left.state is not None and left.state.type.value == "RUNNING"  # nothing ended it

    log = tmp_path / "log.csv"
    simulate_log(1, users=200).to_csv(log, index=False)
    done = irflow(
        "abtest", str(log), "--unit", "user_id", "--no-track", "--output", str(tmp_path / "ab"), env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (crashed,) = flow_runs()
    assert crashed.state is not None and crashed.state.type.value == "CRASHED"
    assert f"irflow process {run.pid} on {this_process()['host']}" in (crashed.state.message or "")
