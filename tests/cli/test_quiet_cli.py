"""Quiet by default, as a user runs it: ``irflow run`` on the demo dataset, exactly as typed (its three
default systems, the latency stage on; fresh cache and MLflow store, so the model encodes the corpus,
FAISS loads and MLflow creates its tables) prints irflow's lines in one format, no Prefect run state and no
other library's INFO, and a table within 120 columns (``support.quiet.assert_quiet_demo``, checked on the one demo run
of the suite: the installed wheel's, in tests/cli/test_install.py); a warm run prints at most 20 lines, and
``-v`` brings Prefect's run states back (with Dask, too, from one Prefect server: tests/tracking/test_tracking.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from support.cli import irflow as irflow_here  # in this process: a warm command as the suite runs it

pytestmark = pytest.mark.e2e

PREFECT_INFO = re.compile(r"^INFO prefect\.", re.M)
WARM_LINES = 20  # the most a warm `irflow run` prints, stdout and stderr together


def env_for(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "IRFLOW_CACHE_DIR": str(tmp_path / "cache"),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
    }


def test_a_warm_run_prints_at_most_20_lines_and_prefect_states_only_with_v(tmp_path: Path) -> None:
    args = ("run", "--system", "bm25", "--latency-runs", "0", "--no-track")
    env = env_for(tmp_path)
    first = irflow_here(*args, "--output", str(tmp_path / "cold"), env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    warm = irflow_here(*args, "--output", str(tmp_path / "warm"), env=env)  # the same cache: nothing to build
    assert warm.returncode == 0, warm.stderr[-3000:]
    printed = (warm.stdout + warm.stderr).splitlines()
    assert len(printed) <= WARM_LINES, "\n".join(printed)
    assert not PREFECT_INFO.search(warm.stderr), warm.stderr
    assert "built BM25 index" not in warm.stderr and "querys" not in warm.stdout + warm.stderr
    assert any(line.startswith("bm25 ") for line in printed)  # the table and the verdict are all there
    loud = irflow_here("-v", *args, "--output", str(tmp_path / "verbose"), env=env)
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert "INFO prefect.task_runs: [retrieve bm25] Finished in state Completed()" in loud.stderr
    assert "INFO prefect.flow_runs: Beginning flow run" in loud.stderr
