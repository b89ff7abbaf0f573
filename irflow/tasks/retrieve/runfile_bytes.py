"""A run file's content read in bounded pieces (:class:`RunContent`): a regular file only, gzip decompressed
a MiB at a time, hashed as it is read, and checked against :class:`RunLimits` (content bytes, gzip expansion,
TREC line length, a JSON run's size) before more is read. The formats are told apart by their first bytes."""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

from irflow.tasks.core.limits import (
    MAX_EXTRACT_RATIO,
    MAX_RUN_BYTES,
    MAX_RUN_HITS,
    MAX_RUN_JSON_BYTES,
    MAX_RUN_LINE,
    RATIO_FLOOR_BYTES,
    LimitError,
    open_regular,
)
from irflow.tasks.core.runs import TREC_FIELDS
from irflow.tasks.core.schema import InputError

_CHUNK = 1 << 20
_GZIP = 16 + zlib.MAX_WBITS  # zlib reads the gzip header and trailer


@dataclass(frozen=True)
class RunLimits:
    """How much of a run file is read: content bytes, bytes per line, hits per query, gzip expansion ratio,
    content bytes of a JSON run (parsed whole)."""

    bytes: int
    line: int
    hits: int
    ratio: float
    json: int = int(MAX_RUN_JSON_BYTES.default)


def run_limits() -> RunLimits:
    """The reading limits, from ``IRFLOW_MAX_RUN_BYTES``, ``IRFLOW_MAX_RUN_LINE``, ``IRFLOW_MAX_RUN_HITS``,
    (for a gzip file) the archives' ``IRFLOW_MAX_EXTRACT_RATIO`` and ``IRFLOW_MAX_RUN_JSON_BYTES``
    (:mod:`irflow.tasks.core.limits`)."""
    return RunLimits(
        MAX_RUN_BYTES.bytes(),
        MAX_RUN_LINE.bytes(),
        MAX_RUN_HITS.bytes(),
        MAX_EXTRACT_RATIO.value(),
        MAX_RUN_JSON_BYTES.bytes(),
    )


class RunContent:
    """A run file's content (gzip decompressed) in pieces of at most a MiB, checked against the limits as it
    is read: past ``limits.bytes`` of content, past ``limits.ratio`` times the compressed bytes read so far
    once past 64 MiB (a gzip bomb), a line longer than ``limits.line`` in a TREC run (JSON may be one line).
    Hashes the stored bytes (``digest``)."""

    def __init__(self, where: str, limits: RunLimits) -> None:
        self.where, self.limits = where, limits
        self.fh = open_regular(where, "a run file")
        self.digest = hashlib.sha256()
        self.skipped_lines = 0  # blank lines before the content
        self.compressed = False
        self.fmt: str | None = None  # trec | json | parquet, once a byte past whitespace was read

    def __enter__(self) -> RunContent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.fh.close()

    def format(self) -> tuple[str, Iterator[bytes]]:
        """The run's format (by its first bytes past whitespace) and its content from there on."""
        where, limits = self.where, self.limits
        size = os.fstat(self.fh.fileno()).st_size
        head = self.fh.read(_CHUNK)
        self.compressed = head[:2] == b"\x1f\x8b"
        if size > limits.bytes and not self.compressed:
            raise LimitError(limit_passed(MAX_RUN_BYTES, limits.bytes, f"the run file has {size:,} bytes"), path=where)
        pieces = self._checked(head)
        for piece in pieces:
            if self.fmt is None:  # whitespace only: counted, not kept
                self.skipped_lines += piece.count(b"\n")
                continue
            return self.fmt, chain([piece], pieces)
        return "trec", iter(())

    def _checked(self, head: bytes) -> Iterator[bytes]:
        where, limits = self.where, self.limits
        total, lines, line = 0, 1, 0
        for piece, read in _pieces(self.fh, head, self.digest, where, self.compressed):
            if self.fmt is None and (start := re.search(rb"\S", piece)) is not None:
                text = piece[start.start() :]
                self.fmt = "parquet" if text[:4] == b"PAR1" and not total else "json" if text[:1] == b"{" else "trec"
                size = os.fstat(self.fh.fileno()).st_size
                if self.fmt == "json" and not self.compressed and size > limits.json:  # parsed whole: refused unread
                    what = f"the JSON run has {size:,} bytes"
                    raise LimitError(limit_passed(MAX_RUN_JSON_BYTES, limits.json, what), path=where)
            total += len(piece)
            if total > limits.bytes:
                raise LimitError(limit_passed(MAX_RUN_BYTES, limits.bytes, "the run's content"), path=where)
            if self.fmt == "json" and total > limits.json:  # parsed whole: ~12 times its size in memory
                raise LimitError(limit_passed(MAX_RUN_JSON_BYTES, limits.json, "a JSON run's content"), path=where)
            if self.compressed and total > RATIO_FLOOR_BYTES and total > limits.ratio * read:
                raise InputError(
                    f"the gzip run expands {total / read:,.0f} times, more than {limits.ratio:g} (a gzip bomb? "
                    f"IRFLOW_MAX_EXTRACT_RATIO; {total:,} bytes from {read:,})",
                    path=where,
                )
            if self.fmt in (None, "trec"):
                lines, line = _line_lengths(piece, lines, line, limits.line, where)
            yield piece


def limit_passed(limit: Any, value: float, what: str) -> str:
    """``limit.passed(what)`` for the value ``limits`` carry (the environment's unless a caller set one)."""
    return f"{what}: more than {value:,.0f} {limit.unit} ({limit.env}; raise it to allow more)"


def _pieces(fh: Any, raw: bytes, digest: Any, where: str, compressed: bool) -> Iterator[tuple[bytes, int]]:
    """The file's content in pieces of at most a MiB (each gzip member in turn), with the bytes of the file
    read to make it; hashes the stored bytes."""
    inflate = zlib.decompressobj(_GZIP) if compressed else None
    pending = False  # a gzip member has started and not ended
    read = 0
    try:
        while raw:
            digest.update(raw)
            read += len(raw)
            if inflate is None:
                yield raw, read
                raw = b""
            while raw and inflate is not None:
                pending = True
                piece = inflate.decompress(raw, _CHUNK)
                raw = inflate.unconsumed_tail
                yield piece, read - len(raw)
                if inflate.eof:  # the next member (gzip allows several) starts in what is left
                    raw, inflate, pending = inflate.unused_data, zlib.decompressobj(_GZIP), False
            raw = fh.read(_CHUNK)
        if inflate is not None:
            yield inflate.flush(), read
    except zlib.error as exc:
        raise InputError(f"damaged gzip data: {exc}", path=where) from None
    if pending and inflate is not None and not inflate.eof:
        raise InputError("damaged gzip data: the file ends inside its compressed stream", path=where)


def _line_lengths(piece: bytes, lines: int, line: int, limit: int, where: str) -> tuple[int, int]:
    """``(number of the open line, its length so far)`` after ``piece``; a line past ``limit`` bytes fails."""
    newlines = piece.count(b"\n")
    if not newlines:
        return lines, _short(line + len(piece), lines, limit, where)
    _short(line + piece.find(b"\n"), lines, limit, where)
    if len(piece) > limit:  # a whole line inside the piece can be too long only then
        for i, segment in enumerate(piece.split(b"\n")[1:-1], 1):
            _short(len(segment), lines + i, limit, where)
    return lines + newlines, _short(len(piece) - piece.rfind(b"\n") - 1, lines + newlines, limit, where)


def _short(length: int, lineno: int, limit: int, where: str) -> int:
    if length > limit:
        raise InputError(
            f"a line longer than {limit:,} bytes (IRFLOW_MAX_RUN_LINE): expected TREC lines '{TREC_FIELDS}'",
            path=where,
            line=lineno,
        )
    return length


__all__ = ["RunContent", "RunLimits", "limit_passed", "run_limits"]
