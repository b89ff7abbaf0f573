"""Result folders (``--output``): checked before any work, published whole.

A result folder is built in a temporary folder beside it and renamed into place in one step, so a
run that fails or is killed leaves the previous results (or nothing), never half of new ones. Since
publishing replaces the folder, only an empty folder or one that holds irflow results (its
``marker`` file) may be replaced: a typo cannot wipe a folder of other files.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from irflow.tasks.core.atomic import is_temp_name, publish_dir
from irflow.tasks.core.schema import InputError


def check_output(path: str | os.PathLike[str], option: str = "--output", marker: str | None = "metrics.json") -> Path:
    """``path`` as a folder results can be published to; InputError naming ``option`` otherwise.

    Refused: an existing file (or a file on the way), a folder holding something other than irflow
    results (no ``marker`` file; ``marker=None`` for a folder that is written into, never replaced),
    and a place that cannot be written. Writability is tried with a real write beside the folder,
    where the temporary build folder will go, and in the folder itself when it exists (publishing swaps
    it out, which rewrites its ``..``; permission bits say nothing for root, and a read-only mount says
    nothing in them). Nothing is left behind.
    """
    target = Path(path).expanduser()
    where = f"{option} {str(path)!r}"
    if target.exists() and not target.is_dir():
        raise InputError(f"{where}: expected a folder for the results, found a file")
    if target.is_dir() and marker is not None:
        entries = [e for e in target.iterdir() if not is_temp_name(e.name)]
        if entries and not (target / marker).is_file():
            raise InputError(
                f"{where}: the folder holds files that are not irflow results (no {marker}), and publishing "
                "replaces the whole folder; expected a new or empty folder, or one with earlier results"
            )
    parent = target.absolute().parent
    existing = parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{where}: expected a folder, but {existing} is a file")
    # the temporary build folder goes beside the target; an existing target is swapped out (its ".."
    # entry rewritten) or written into, which needs the target itself writable too
    for place in (existing, target) if target.is_dir() else (existing,):
        try:
            with tempfile.TemporaryDirectory(prefix=".irflow-write-check-", dir=place) as probe:
                (Path(probe) / "probe").write_bytes(b"")
        except OSError as err:
            raise InputError(
                f"{where}: {place} cannot be written ({err.strerror or type(err).__name__}); "
                "expected a folder irflow can write to"
            ) from None
    return target


@contextlib.contextmanager
def publish(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; when the block succeeds it replaces ``target`` whole."""
    with publish_dir(target, replace=True) as build:
        yield build


__all__ = ["check_output", "publish"]
