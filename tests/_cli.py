"""The ``irflow`` command as a user runs it, in a subprocess from the project folder."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def irflow(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``python -m irflow.cli ARGS`` with ``env``; stdout and stderr captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "irflow.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@contextmanager
def script_server(*args: str, env: dict[str, str] | None = None) -> Iterator[int]:
    """Start a test server script (``python SCRIPT ARGS``, printing its port first); yield the port; stop
    it by its PID (terminate, then kill after 10 s)."""
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, env=env)
    try:
        yield int(proc.stdout.readline())  # type: ignore[union-attr]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
