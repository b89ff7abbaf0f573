"""Two processes opening the same new sqlite tracking store at once: both succeed (MLflow's table
creation happens under a lock, not twice at once, which failed with "table ... already exists")."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 3

OPENER = """
import sys, time
from pathlib import Path
from irflow.tasks.tracking.store import Tracker
import mlflow.tracking  # imported before the start line, so both processes start creating together
folder = Path(sys.argv[1])
(folder / f"ready-{sys.argv[2]}").touch()
for n in range(int(sys.argv[3])):
    while not (folder / f"go-{n}").exists():
        time.sleep(0.002)
    Tracker("irflow", f"sqlite:///{folder / f'mlflow-{n}.db'}").experiment_id
"""


def test_two_processes_create_one_new_sqlite_store(tmp_path):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, str(tmp_path), str(i), str(ROUNDS)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 300
        while not all((tmp_path / f"ready-{i}").exists() for i in range(2)) and time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.05)
        for n in range(ROUNDS):
            (tmp_path / f"go-{n}").touch()
        results = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-2000:]


def test_a_store_whose_folder_cannot_hold_the_lock_still_opens(tmp_path, monkeypatch):
    """A shared store in a read-only folder is read (compare, report) without the creation lock."""
    from irflow.tasks.tracking import store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert store.Tracker("irflow", uri).experiment_id  # created with the lock

    def refused(path, **kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(store, "file_lock", refused)
    assert store.Tracker("irflow", uri).client.get_experiment_by_name("irflow") is not None
