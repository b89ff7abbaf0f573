"""Tracking stores for tests: unusable in ways that hold for root too."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest


def read_only_database(path: Path) -> None:
    """A real MLflow database that SQLite itself opens read-only, whoever asks (root included): byte 18
    of the header, the file format *write* version, set above 2 ("the database must be treated as
    read-only", sqlite.org/fileformat.html)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{path}")
    client.create_experiment("irflow")
    client._tracking_client.store.engine.dispose()  # no pooled connection keeps an old header in memory
    with open(path, "r+b") as fh:
        fh.seek(18)
        fh.write(b"\x03")
    with sqlite3.connect(path) as connection, pytest.raises(sqlite3.OperationalError, match="readonly"):
        connection.execute("CREATE TABLE t (x)")  # the fixture really cannot be written
