"""Atomic writes: write to a temporary file (or folder) beside the target, then rename.

An interrupted run therefore never leaves a half-written file that a later run trusts:
the target either has its old content or the complete new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; on success rename it onto ``target``."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o644)  # mkstemp's 0600 would make a shared cache unreadable to other users
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(target: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file for writing; it replaces ``target`` only if the block succeeds."""
    with atomic_path(target) as tmp, open(tmp, mode, **kwargs) as fh:
        yield fh


@contextlib.contextmanager
def publish_dir(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; on success rename it to ``target`` in one step.

    For content-addressed caches: if another process published ``target`` first, its folder (built
    from the same inputs) is kept and this one is dropped. A failure leaves no partial folder.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(target: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as pretty, key-sorted JSON, atomically."""
    with atomic_open(target, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, ensure_ascii=False)
        fh.write("\n")
