"""A durable, append-only JSONL store of judge votes: the only state a resumed annotation needs.

Each line is one vote: which pair and judge, the judge's version, the swap flag, the raw and the
unswapped score (``null`` = missing), reasoning and error. ``append`` writes whole lines with one
``write`` and fsyncs before returning, so a vote the runner has counted survives a crash, Ctrl-C
or power loss; a crash can tear at most the line being written, which the next open cuts off.
An exclusive lock keeps two runs from writing (and paying for) the same votes at once.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError, IrflowError

VOTE_COLUMNS = (
    "pair_id",
    "query_id",
    "doc_a",
    "doc_b",
    "judge",
    "version",
    "swapped",
    "raw_score",
    "score",
    "reasoning",
    "error",
    "attempts",
    "seconds",
)


FREE_TEXT = ("reasoning", "error")  # the fields of a vote a judge's answer fills with free text


class VoteStore:
    """``votes.jsonl`` under an exclusive lock; use as a context manager (``with VoteStore(p) as s``)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def __enter__(self) -> VoteStore:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise IrflowError(
                f"another annotation is writing to {self.path}; wait for it or use another output folder"
            ) from None
        self._fd = fd
        _cut_torn_tail(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Append records as lines, one write and one fsync for the batch; secrets in the texts a judge
        returned (``reasoning``, ``error``) are stored as ``***`` (an answer may echo the API key)."""
        if self._fd is None:
            raise RuntimeError("VoteStore.append outside 'with'")
        records = [
            {k: redact(v) if k in FREE_TEXT and isinstance(v, str) else v for k, v in r.items()} for r in records
        ]
        data = "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records).encode()
        if data:
            os.write(self._fd, data)
            os.fsync(self._fd)

    def read(self) -> pd.DataFrame:
        """Every vote, the latest record per (pair, judge, version) winning; columns ``VOTE_COLUMNS``."""
        return read_votes(self.path)


def _cut_torn_tail(fd: int) -> None:
    """Drop a partial last line (a write torn by a crash) so the next record starts on a line of its own."""
    size = os.fstat(fd).st_size
    start = max(0, size - (1 << 22))  # a vote line is far shorter than 4 MiB
    tail = os.pread(fd, size - start, start)
    if tail and not tail.endswith(b"\n"):
        os.ftruncate(fd, start + tail.rfind(b"\n") + 1)


def read_votes(path: str | Path) -> pd.DataFrame:
    """The votes of a store file (missing file: none). A torn last line is ignored; any other bad line is an error."""
    path = Path(path)
    rows = []
    if path.is_file():
        lines = path.read_bytes().split(b"\n")
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                if number == len(lines):  # torn by a crash, cut off on the next open
                    continue
                raise InputError("not a JSON vote record", path=str(path), line=number) from None
    votes = pd.DataFrame(rows, columns=list(VOTE_COLUMNS))
    votes = votes.drop_duplicates(["pair_id", "judge", "version"], keep="last").reset_index(drop=True)
    return votes.astype({"score": "float64", "raw_score": "float64"})
