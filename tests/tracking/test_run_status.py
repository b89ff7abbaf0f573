"""No MLflow run stays RUNNING: an error while logging (a full disk) ends the runs FAILED, SIGTERM
ends them KILLED (``tasks.tracking.store.ending_runs``)."""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.cli import ROOT

from irflow.tasks.tracking.store import Tracker, ending_runs

FULL = OSError(errno.ENOSPC, "No space left on device")


class Signal(BaseException):
    """As Prefect's TerminationSignal: what SIGTERM raises while a flow runs."""


def _statuses(db: Path) -> dict[str, str]:
    """Run name -> status, read from the store's database (as the MLflow UI lists them)."""
    with sqlite3.connect(db) as con:
        return dict(con.execute("select name, status from runs").fetchall())


@pytest.mark.parametrize(("error", "status"), [(FULL, "FAILED"), (KeyboardInterrupt(), "KILLED"), (Signal(), "KILLED")])
def test_runs_left_open_by_an_error_end_failed_or_killed(tmp_path: Path, error: BaseException, status: str) -> None:
    tracker = Tracker("status", f"sqlite:///{tmp_path / 'mlflow.db'}")
    outside = tracker.start("outside", "suite")
    with pytest.raises(type(error)), ending_runs():
        parent = tracker.start("parent", "evaluation", parent=outside)
        tracker.start("child", "system", parent=parent)
        tracker.end(tracker.start("done", "system", parent=parent))
        raise error
    assert _statuses(tmp_path / "mlflow.db") == {
        "outside": "RUNNING",  # not started in the block: its own owner ends it
        "parent": status,
        "child": status,
        "done": "FINISHED",
    }


@pytest.mark.e2e
def test_a_full_disk_while_logging_ends_the_runs_failed_and_keeps_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from irflow.flows.evaluate import evaluate_flow

    def full(self: Tracker, run_id: str, folder: object, *args: object, **kwargs: object) -> None:
        raise FULL

    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.setattr(Tracker, "log_files", full)
    out = tmp_path / "out"
    state = evaluate_flow(systems=["bm25"], metrics=["nDCG@10"], latency_runs=0, output=str(out), return_state=True)
    assert state.is_failed() and "No space left on device" in str(state.message)
    assert (out / "metrics.json").is_file() and (out / "report.md").is_file()
    statuses = _statuses(db)
    assert statuses and set(statuses.values()) == {"FAILED"}, statuses
    document = json.loads((out / "metrics.json").read_text())  # no claim of runs, and no silence either
    assert "mlflow" not in document and document["tracking"]["status"] == "failed", document.get("tracking")
    assert "No space left on device" in document["tracking"]["error"]


OPENS_A_RUN = """
import os, signal, sys, time
from irflow.tasks.tracking.store import Tracker

tracker = Tracker("orphans", sys.argv[1])
parent = tracker.start("parent-" + sys.argv[2], "evaluation")
tracker.start("child-" + sys.argv[2], "system", parent=parent)
print("started", flush=True)
if sys.argv[2] == "killed":
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or `kill -9` ends irflow: nothing runs after
time.sleep(120)
"""


def test_runs_left_running_by_a_killed_process_end_killed_when_the_store_is_next_opened(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    script = tmp_path / "opens_a_run.py"
    script.write_text(OPENS_A_RUN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    alive = subprocess.Popen([sys.executable, str(script), uri, "alive"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert alive.stdout is not None and alive.stdout.readline().strip() == "started"
        killed = subprocess.run([sys.executable, str(script), uri, "killed"], env=env, capture_output=True, timeout=120)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        assert set(_statuses(tmp_path / "mlflow.db").values()) == {"RUNNING"}

        from irflow.tasks.tracking import store

        store._SETTLED.discard(uri)  # as a new process: it has not looked at this store yet
        assert Tracker("another", uri).experiment_id  # the next irflow touching the store
        assert _statuses(tmp_path / "mlflow.db") == {
            "parent-killed": "KILLED",
            "child-killed": "KILLED",
            "parent-alive": "RUNNING",  # its process still runs: its runs are its own to end
            "child-alive": "RUNNING",
        }
        with sqlite3.connect(tmp_path / "mlflow.db") as con:
            tags = dict(con.execute("select key, value from tags where key like 'irflow.%'").fetchall())
        assert tags["irflow.host"] and tags["irflow.pid"].isdigit() and "was gone" in tags["irflow.ended_by"]
    finally:
        alive.kill()
        alive.wait()


SLOW_STORE = """
    # Test hook: the first artifact upload announces itself and hangs, as a slow artifact store does.
    import time
    from pathlib import Path

    from irflow.tasks.tracking.store import Tracker

    def slow(self, run_id, folder, *args, **kwargs):
        Path({marker!r}).write_text(run_id)
        time.sleep(120)

    Tracker.log_files = slow
"""


@pytest.mark.e2e
def test_sigterm_while_logging_ends_the_mlflow_runs_killed(tmp_path: Path) -> None:
    hook, marker, db = tmp_path / "hook", tmp_path / "logging", tmp_path / "mlflow.db"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(textwrap.dedent(SLOW_STORE.format(marker=str(marker))))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{db}",
    }
    command = [sys.executable, "-m", "irflow.cli", "run", "--system", "bm25", "--latency-runs", "0"]
    run = subprocess.Popen(
        [*command, "--output", str(tmp_path / "out")], env=env, cwd=ROOT, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), "the run never reached MLflow logging"
        with sqlite3.connect(db) as con:
            (before,) = con.execute("select status from runs where run_uuid = ?", (marker.read_text(),)).fetchone()
        assert before == "RUNNING"
        run.send_signal(signal.SIGTERM)
        _, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 143, stderr[-3000:]
    statuses = _statuses(db)
    assert statuses and set(statuses.values()) == {"KILLED"}, statuses
    assert (tmp_path / "out" / "metrics.json").is_file()  # the results were written before tracking
