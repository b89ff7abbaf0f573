"""SIGTERM during a corpus encode ends ``irflow run`` at once: the encode runs in a Prefect worker
thread, which Python's signal handler never reaches, so it stops at its next batch
(``tasks.core.stop``) instead of encoding the rest of the corpus first; nothing is left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.cli import ROOT

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.shared,
    pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads the process table from /proc"),
]


def _session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (zombies waiting for a reaper do not count)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[3]) == sid:  # state, ppid, pgrp, session
            found.append(int(stat.parent.name))
    return found


def test_sigterm_during_an_embed_exits_within_seconds_and_leaves_no_process(
    beir_dir: Path, serve_dir: Any, tmp_path: Path
) -> None:
    base, _ = serve_dir(beir_dir)
    cache = tmp_path / "cache"
    env = {
        **os.environ,
        "IRFLOW_BEIR_BASE_URL": base,
        "IRFLOW_CACHE_DIR": str(cache),
        "PREFECT_HOME": str(tmp_path / "prefect"),
    }
    command = [sys.executable, "-m", "irflow.cli", "run", "--dataset", "beir/scifact", "--system", "dense:minilm"]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        run = subprocess.Popen(
            [*command, "--latency-runs", "0", "--output", str(tmp_path / "out")],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,  # its session holds whatever it starts: found below if left behind
        )
    try:
        deadline = time.monotonic() + 400
        while not list(cache.glob("embeddings/*/_lock")) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert list(cache.glob("embeddings/*/_lock")), "the encode never started"
        time.sleep(3)  # well into the encode (SciFact's 5,183 documents take minutes here)
        assert run.poll() is None, "the encode ended before it could be interrupted"
        sent = time.monotonic()
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=120)
        seconds = time.monotonic() - sent
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    print(f"irflow run exited {seconds:.1f} s after SIGTERM during the embed")
    log = (tmp_path / "stderr.txt").read_text()
    assert run.returncode == 143 and "irflow: terminated" in log, log[-3000:]
    assert seconds < 30, f"exited {seconds:.1f} s after SIGTERM"  # generous: machines are noisy; ~1-2 s unloaded
    time.sleep(1)
    assert _session_members(run.pid) == [], "processes left behind by the stopped run"
    assert not list(cache.glob("embeddings/*/.*.tmp")), "a half-written part was left"
