"""SIGTERM in any stage ends ``irflow run`` within seconds, with one line and exit code 143: no
``TerminationSignal`` traceback, no stage that runs on for half a minute (issue 35). Each case holds one
stage (a hook on ``PYTHONPATH`` announces it and keeps it busy with its real work) and stops the run there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.cli import ROOT

pytestmark = pytest.mark.e2e

HOLD = """
    # Test hook: the stage announces itself, then does its real work over and over.
    import importlib
    from pathlib import Path

    module = importlib.import_module({module!r})
    original = getattr(module, {name!r})

    def held(*args, **kwargs):
        Path({marker!r}).write_text("in the stage")
        for _ in range(200):
            result = original(*args, **kwargs)
        return result

    setattr(module, {name!r}, held)
"""

STAGES = {
    "report": ("irflow.tasks.report.write", "save_results"),
    "metrics": ("irflow.tasks.metrics", "evaluate"),
    "retrieve": ("irflow.tasks.retrieve.searchers", "retrieve"),
}


@pytest.mark.parametrize("stage", list(STAGES))
def test_sigterm_in_a_stage_ends_the_run_within_seconds_in_one_line(tmp_path: Path, stage: str) -> None:
    module, name = STAGES[stage]
    hook, marker = tmp_path / "hook", tmp_path / "in-stage"
    hook.mkdir()
    code = HOLD.format(module=module, name=name, marker=str(marker))
    (hook / "sitecustomize.py").write_text(textwrap.dedent(code))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        "PREFECT_HOME": str(tmp_path / "prefect"),
    }
    command = [sys.executable, "-m", "irflow.cli", "run", "--system", "bm25", "--latency-runs", "0"]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        run = subprocess.Popen([*command, "--output", str(tmp_path / "out")], env=env, cwd=ROOT, stderr=stderr)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), (tmp_path / "stderr.txt").read_text()[-3000:]
        time.sleep(0.5)
        sent = time.monotonic()
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=60)
        seconds = time.monotonic() - sent
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    log = (tmp_path / "stderr.txt").read_text()
    print(f"exited {seconds:.1f} s after SIGTERM in the {stage} stage")
    assert run.returncode == 143, log[-3000:]
    assert seconds < 5, f"exited {seconds:.1f} s after SIGTERM"
    assert "Traceback" not in log and "TerminationSignal" not in log, log[-3000:]
    assert log.strip().splitlines()[-1].startswith("irflow: terminated"), log[-3000:]
