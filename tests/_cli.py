"""The ``irflow`` command as a user runs it, in a subprocess from the project folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def irflow(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``python -m irflow.flows.cli ARGS`` with ``env``; stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "irflow.flows.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
