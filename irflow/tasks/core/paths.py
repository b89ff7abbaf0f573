"""What a path is, for the messages that refuse it: irflow reads input files only when they are regular
files (``/dev/zero`` would never end, a FIFO would block, a directory is no file), and says what the path
is instead of "no such file": ``a character device, not a regular file``, ``a directory``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from irflow.tasks.core.schema import InputError

_KINDS = (
    (stat.S_ISDIR, "a directory, not a regular file"),
    (stat.S_ISCHR, "a character device, not a regular file"),
    (stat.S_ISBLK, "a block device, not a regular file"),
    (stat.S_ISFIFO, "a FIFO (named pipe), not a regular file"),
    (stat.S_ISSOCK, "a socket, not a regular file"),
)


def describe_mode(mode: int) -> str | None:
    """None for a regular file; else what ``mode`` (``os.stat(...).st_mode``) says the path is."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def describe_path(path: str | os.PathLike[str]) -> str | None:
    """None when ``path`` is a regular file (symbolic links followed); else what it is: ``no such file``,
    ``a directory, not a regular file``, ``a character device, not a regular file``, ... or why it cannot be
    looked at."""
    try:
        return describe_mode(os.stat(path).st_mode)
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"


def regular_file(path: str | os.PathLike[str], expected: str) -> Path:
    """``path`` when it is a regular file; else InputError naming it, what it is and the ``expected`` file."""
    what = describe_path(path)
    if what is not None:
        raise InputError(f"{what}; expected {expected}", path=os.fspath(path))
    return Path(path)


PATH_SUFFIXES = (".qrels", ".trec", ".tsv", ".csv", ".txt", ".jsonl", ".json", ".parquet")
"""Endings that make a name a file even when no such file exists (so the error says "no such file")."""


def file_or_dataset(value: str | os.PathLike[str]) -> str:
    """``"file"`` or ``"dataset"``: what a ``--human`` value (or any argument that takes either) names.

    A file when something exists at that path, when it is written as a path (``./x``, ``/x``, ``~/x``, a
    folder and a name, not ``beir/<name>``) or when it ends like one (:data:`PATH_SUFFIXES`); else a stored
    dataset's name. Nothing is read."""
    text = os.fspath(value)
    if os.path.lexists(os.path.expanduser(text)) or text.startswith((".", "/", "~")):
        return "file"
    if Path(text).suffix.lower() in PATH_SUFFIXES or ("/" in text and not text.startswith("beir/")):
        return "file"
    return "dataset"


__all__ = ["PATH_SUFFIXES", "describe_mode", "describe_path", "file_or_dataset", "regular_file"]
