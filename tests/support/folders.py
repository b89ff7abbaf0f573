"""Private test helper: a working folder that shadows generic top-level module names.

A user's project folder often holds its own ``tasks.py``, a ``flows/`` package and a ``datasets/``
folder. irflow imports only ``irflow.*``, so none of them may be imported when irflow (or Prefect,
running irflow's deployments) works from there: each one raises if it is.
"""

from __future__ import annotations

from pathlib import Path

TRAP = "raise ImportError('irflow imported the working folder\\'s {name} instead of its own module')\n"


def hostile_folder(path: Path) -> Path:
    """Create ``path`` holding ``tasks.py``, ``flows/__init__.py``, ``deployments.py`` and ``datasets/``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "tasks.py").write_text(TRAP.format(name="tasks.py"))
    (path / "deployments.py").write_text(TRAP.format(name="deployments.py"))
    (path / "flows").mkdir(exist_ok=True)
    (path / "flows" / "__init__.py").write_text(TRAP.format(name="flows/"))
    (path / "datasets").mkdir(exist_ok=True)
    (path / "datasets" / "corpus.jsonl").write_text('{"_id": "mine", "text": "a user\'s own data"}\n')
    return path
