"""Prefect homes whose database is already migrated: a copy of the one the run's first Prefect server made.

A Prefect server on a fresh ``PREFECT_HOME`` spends ~8 s (6 s of CPU) creating its database: a hundred-odd
migrations and the block types. The first worker's ``prefect_server`` whose home holds no flow yet publishes
its database as the run's template (SQLite's backup API: a consistent copy of a live database, renamed into
place); a server started later on a home from :func:`seeded_home` starts on a copy of it. Before a template
exists a home is left empty, and its server makes its own database, as a newcomer's first command does.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from irflow.tasks.core.atomic import atomic_path

TEMPLATE = "IRFLOW_TEST_PREFECT_TEMPLATE"  # where the run's template is (set by tests/conftest.py)
DATABASE = "prefect.db"  # Prefect's default database under PREFECT_HOME


def _template() -> Path | None:
    return Path(os.environ[TEMPLATE]) if os.environ.get(TEMPLATE) else None


def seeded_home(home: Path) -> Path:
    """``home``, created, holding a copy of the run's migrated Prefect database when there is one."""
    home.mkdir(parents=True, exist_ok=True)
    template = _template()
    if template is not None and template.is_file() and not (home / DATABASE).exists():
        with atomic_path(home / DATABASE) as partial:
            shutil.copyfile(template, partial)
    return home


def publish_template(home: Path) -> None:
    """Publish ``home``'s database (its server started, no flow in it yet) as the run's template, unless one is."""
    template = _template()
    if template is None or template.exists() or not (home / DATABASE).is_file():
        return
    source = sqlite3.connect(home / DATABASE)
    try:
        (flows,) = source.execute("select count(*) from flow").fetchone()
        if flows:  # a command of an earlier test ran its flows in this home: not a fresh database
            return
        with atomic_path(template) as partial:
            copy = sqlite3.connect(partial)
            try:
                source.backup(copy)
            finally:
                copy.close()
    finally:
        source.close()
