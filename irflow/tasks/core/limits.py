"""Every read bounded: the limits on what irflow reads, each with its default and the environment variable
that raises it, and the checks every reader shares.

A limit passed fails with :class:`LimitError` (an :class:`~irflow.tasks.core.schema.InputError`: the CLI
exits 2) naming the input, the limit and its variable. Values take K, M, G, T suffixes (binary units):
``IRFLOW_MAX_LINE_BYTES=256M``. The table of limits is :data:`LIMITS` (and ``docs/configuration.md``).

Only regular files are read as inputs (:func:`open_regular`): a directory, ``/dev/zero`` or a FIFO is
refused, saying what the path is, before a byte is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from irflow.tasks.core.paths import describe_mode, describe_path
from irflow.tasks.core.schema import InputError


class LimitError(InputError):
    """An input passed one of irflow's reading limits; the message names the input, the limit and its
    environment variable."""


def env_number(name: str, default: float) -> float:
    """A positive number from the environment; K, M, G, T suffixes are binary units (``20G``)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTkmgt]?)(?:i?[Bb])?", value)
    if not match or float(match[1]) <= 0:
        raise InputError(f"{name}={value!r}: expected a positive number, optionally with K, M, G or T (binary units)")
    return float(match[1]) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[match[2].upper()]


@dataclass(frozen=True)
class Limit:
    """One limit: its environment variable, its default, its unit and what it bounds (for the docs)."""

    env: str
    default: float
    unit: str  # bytes | seconds | hits | times
    bounds: str

    def value(self) -> float:
        """The limit now (the environment read afresh, so a test or a shell can change it)."""
        return env_number(self.env, self.default)

    def bytes(self) -> int:
        return int(self.value())

    def passed(self, what: str) -> str:
        """``"<what>: more than 1,024 bytes (IRFLOW_X; raise it to allow more)"``."""
        limit = self.value()
        amount = f"{limit:,.0f}" if float(limit).is_integer() else f"{limit:g}"
        return f"{what}: more than {amount} {self.unit} ({self.env}; raise it to allow more)"


MAX_LINE_BYTES = Limit("IRFLOW_MAX_LINE_BYTES", 64 << 20, "bytes", "one line of a JSON Lines input (answers files)")
MAX_FILE_BYTES = Limit("IRFLOW_MAX_FILE_BYTES", 4 << 30, "bytes", "one input file read whole (answers files)")
MAX_RESPONSE_BYTES = Limit(
    "IRFLOW_MAX_RESPONSE_BYTES", 256 << 20, "bytes", "one HTTP answer body (LLMs, search services, embedding APIs)"
)
RESPONSE_SECONDS = Limit(
    "IRFLOW_RESPONSE_SECONDS", 300, "seconds", "one HTTP answer, from the request sent to the body's last byte"
)
MAX_RUN_BYTES = Limit("IRFLOW_MAX_RUN_BYTES", 4 << 30, "bytes", "the content of one run file (after gzip)")
MAX_RUN_JSON_BYTES = Limit(
    "IRFLOW_MAX_RUN_JSON_BYTES", 1 << 30, "bytes", "the content of one JSON run file, parsed whole (~12x in memory)"
)
MAX_RUN_LINE = Limit("IRFLOW_MAX_RUN_LINE", 1 << 20, "bytes", "one line of a TREC run file")
MAX_RUN_HITS = Limit("IRFLOW_MAX_RUN_HITS", 100_000, "hits", "the hits of one query in a run file")
MAX_DOWNLOAD_BYTES = Limit("IRFLOW_MAX_DOWNLOAD_BYTES", 16 << 30, "bytes", "one downloaded archive (a BEIR zip)")
DOWNLOAD_SECONDS = Limit(
    "IRFLOW_DOWNLOAD_SECONDS", 6 * 3600, "seconds", "one download, from the request sent to its last byte"
)
MAX_EXTRACT_BYTES = Limit("IRFLOW_MAX_EXTRACT_BYTES", 32 << 30, "bytes", "what one BEIR zip expands to")
MAX_EXTRACT_RATIO = Limit(
    "IRFLOW_MAX_EXTRACT_RATIO", 100.0, "times", "how much a zip or gzip input expands (past 64 MiB; a bomb)"
)
RATIO_FLOOR_BYTES = 64 << 20
"""Expansion below this many bytes is never a bomb, whatever its ratio."""

LIMITS = (
    MAX_LINE_BYTES,
    MAX_FILE_BYTES,
    MAX_RESPONSE_BYTES,
    RESPONSE_SECONDS,
    MAX_RUN_BYTES,
    MAX_RUN_JSON_BYTES,
    MAX_RUN_LINE,
    MAX_RUN_HITS,
    MAX_DOWNLOAD_BYTES,
    DOWNLOAD_SECONDS,
    MAX_EXTRACT_BYTES,
    MAX_EXTRACT_RATIO,
)


def open_regular(path: str | os.PathLike[str], expected: str) -> BinaryIO:
    """``path`` opened for reading in binary when it is a regular file (checked on the open file, so a FIFO
    neither blocks the open nor is read); else an InputError as :func:`check_regular` words it."""
    where = os.fspath(path)
    try:
        fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        raise InputError(f"{describe_path(where)}; expected {expected}", path=where) from None
    what = describe_mode(os.fstat(fd).st_mode)
    if what is not None:
        os.close(fd)
        raise InputError(f"{what}; expected {expected}", path=where)
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def bounded_lines(
    path: str | os.PathLike[str],
    expected: str,
    *,
    line: Limit = MAX_LINE_BYTES,
    total: Limit = MAX_FILE_BYTES,
) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes without the newline)`` of a regular file, never holding more than one line: a
    line past ``line`` bytes or a file past ``total`` bytes fails at once with a :class:`LimitError`
    naming the file (and line), the limit and its variable. Blank lines cost nothing but their bytes."""
    where = os.fspath(path)
    longest, most = line.bytes(), total.bytes()
    with open_regular(where, expected) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > most:
            raise LimitError(total.passed(f"the file has {size:,} bytes"), path=where)
        read = 0
        number = 0
        while True:
            raw = fh.readline(longest + 1)  # at most one byte past the limit is read
            if not raw:
                return
            number += 1
            read += len(raw)
            if read > most:
                raise LimitError(total.passed("the file grew while read"), path=where)
            if len(raw) > longest and not (len(raw) == longest + 1 and raw.endswith(b"\n")):
                raise LimitError(line.passed("line too long"), path=where, line=number)
            yield number, raw.rstrip(b"\n")


__all__ = [
    "DOWNLOAD_SECONDS",
    "LIMITS",
    "MAX_DOWNLOAD_BYTES",
    "MAX_EXTRACT_BYTES",
    "MAX_EXTRACT_RATIO",
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_RESPONSE_BYTES",
    "MAX_RUN_BYTES",
    "MAX_RUN_HITS",
    "MAX_RUN_JSON_BYTES",
    "MAX_RUN_LINE",
    "RATIO_FLOOR_BYTES",
    "RESPONSE_SECONDS",
    "Limit",
    "LimitError",
    "bounded_lines",
    "env_number",
    "open_regular",
]
