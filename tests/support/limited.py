"""Bombs and endless bodies run in a child Python under a memory limit (``RLIMIT_AS``): reading everything, as
an unbounded reader would, dies there instead of taking the test machine with it.

``in_child(code)`` runs ``code`` in a fresh interpreter (the tests folder importable), limited to ``limit`` bytes
of address space; an :class:`~irflow.tasks.core.schema.IrflowError` leaving it is printed as the CLI prints it
(``irflow: error: ...``) and exits 2. The child's own peak resident memory (VmHWM) ends its stderr
(:func:`peak_bytes`): ``ru_maxrss`` would carry the forking pytest's peak across ``exec``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GIB = 1 << 30
CHILD = """
import resource, sys
from irflow.tasks.core.schema import IrflowError
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    exec(sys.argv[1])
except IrflowError as exc:
    print(f"irflow: error: {exc}", file=sys.stderr)
    sys.exit(2)
finally:
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print("maxrss_kib", peak.split()[1], file=sys.stderr)
"""


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment, the tests folder on ``PYTHONPATH``, plus ``extra``."""
    path = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    return {**os.environ, "PYTHONPATH": path, **extra}


def in_child(
    code: str, timeout: float = 300, limit: int = 2 * GIB, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh Python limited to ``limit`` bytes of address space; IrflowError -> exit 2.
    ``timeout`` is a safety net (the test fails, nothing hangs), not a speed assertion."""
    return subprocess.run(
        [sys.executable, "-c", CHILD, code, str(limit)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or child_env(),
        check=False,
    )


def stop_child(child: subprocess.Popen[bytes], signum: int, timeout: float = 60) -> tuple[bytes, bytes]:
    """Send ``signum`` to a running child and collect its output; a child still alive after ``timeout`` (a
    safety net) is killed and the test fails."""
    try:
        child.send_signal(signum)
        return child.communicate(timeout=timeout)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def peak_bytes(done: subprocess.CompletedProcess[str]) -> int:
    """The child's peak resident memory (VmHWM), in bytes."""
    return int(done.stderr.rsplit("maxrss_kib", 1)[1].split()[0]) * 1024
