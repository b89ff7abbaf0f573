"""The temporary Prefect server a command starts (``flows/prefect_api.py``): Prefect's real API under
uvicorn on a loopback port, used by real flow runs, stopped by its own process id."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.settings import (
    PREFECT_API_URL,
    PREFECT_SERVER_DATABASE_CONNECTION_URL,
    get_current_settings,
    temporary_settings,
)
from support.prefect_home import seeded_home

from irflow.flows import prefect_api

pytestmark = pytest.mark.usefixtures("temporary_prefect_server")  # what a command does with no API configured


@task(cache_policy=NONE)
def double(x: int) -> int:
    return 2 * x


@flow(name="prefect-api-probe")
def probe_flow(n: int) -> int:
    return sum(double(i) for i in range(n))


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.e2e
def test_command_scope_runs_flows_on_its_own_server_and_stops_it() -> None:
    assert get_current_settings().api.url is None and "PREFECT_API_URL" not in os.environ
    with prefect_api.prefect_api():
        server = prefect_api._server
        assert server is not None and server.process is not None and server.process.poll() is None
        prefect_api.ready("json")
        prefect_api.ready()  # idempotent
        assert get_current_settings().api.url == os.environ["PREFECT_API_URL"] == server.api_url
        assert get_current_settings().flows.heartbeat_frequency is None
        assert not get_current_settings().ui_url  # no UI: no dead "View at" links or MLflow URL tags
        state = probe_flow(3, return_state=True)
        assert state.is_completed() and state.result() == 6
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(state.state_details.flow_run_id)
            assert run.state is not None and run.state.is_completed()
            deadline = time.monotonic() + 30  # task runs are recorded from events, a moment later
            while True:
                task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
                if len(task_runs) == 3 and all(t.state and t.state.is_completed() for t in task_runs):
                    break
                assert time.monotonic() < deadline, f"task runs recorded: {task_runs}"
                time.sleep(0.2)
        pid, url = server.process.pid, server.api_url
        assert _answers(url)
    assert server.process is not None and server.process.poll() is not None, f"server {pid} still running"
    assert not _answers(url)
    assert get_current_settings().api.url is None and "PREFECT_API_URL" not in os.environ
    assert prefect_api._server is None


@pytest.mark.e2e
def test_a_server_stopped_while_starting_stops_quietly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An early error ends the command while the server is still starting: the start watcher must
    end without touching the closed log (it printed a thread traceback after the error message)."""
    import threading

    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda hook: errors.append(hook.exc_value))
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    for _ in range(3):
        server = prefect_api.TemporaryServer()
        time.sleep(0.5)  # spawned, not answering yet
        server.stop()
        assert not server.starting and server.process is not None and server.process.poll() is not None
    time.sleep(0.5)  # a watcher still running would fail here, after stop() returned
    assert errors == []


@pytest.mark.e2e
def test_a_configured_api_is_used_as_is() -> None:
    with temporary_settings({PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        with prefect_api.prefect_api():
            assert prefect_api._server is None
            prefect_api.ready("json")
            assert get_current_settings().api.url == "http://127.0.0.1:9/api"


@pytest.mark.e2e
def test_a_server_that_cannot_start_fails_with_its_output(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the database folder should be")
    database = f"sqlite+aiosqlite:///{blocker / 'prefect.db'}"
    with temporary_settings({PREFECT_SERVER_DATABASE_CONNECTION_URL: database}):
        with pytest.raises(prefect_api.PrefectServerError, match="exited with code") as failure:
            with prefect_api.prefect_api():
                prefect_api.ready()
    assert "not-a-folder" in str(failure.value) or "database" in str(failure.value).lower()


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid``, read by pid from /proc/<pid>/task/*/children (never by name)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for children in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                new = {int(c) for c in children.read_text().split()} - found
            except OSError:  # gone meanwhile
                continue
            found |= new
            todo.extend(new)
    return found


def _running(pid: int) -> bool:
    """Running, and not a zombie left for a PID 1 that does not reap (as in some containers)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the process tree from /proc")
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_stopped_dask_run_leaves_no_process_behind(stop: signal.Signals, tmp_path: Path) -> None:
    """``irflow run --task-runner dask``: the temporary Prefect server, the local Dask cluster's workers
    and multiprocessing's helpers all end with the command, however it is stopped."""
    env = {**os.environ, "PREFECT_HOME": str(seeded_home(tmp_path / "prefect"))}
    run = subprocess.Popen(
        [sys.executable, "-m", "irflow.cli", "run", "--task-runner", "dask", "--system", "bm25"]
        + ["--latency-runs", "0", "--no-track", "--output", str(tmp_path / "out")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        tree: set[int] = set()
        while len(tree) < 4:  # the server, then the cluster: 2 workers and multiprocessing's resource tracker
            assert run.poll() is None and time.monotonic() < deadline, f"the run ended or stalled; saw {tree}"
            tree |= _descendants(run.pid)
            time.sleep(0.2)
        time.sleep(1)
        tree |= _descendants(run.pid)
        run.send_signal(stop)
        run.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_running(pid) for pid in tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in tree if _running(pid)}
        assert not left, f"left running after {stop.name} of the command: {left}"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
