"""``run:<path>``: a ranking produced elsewhere, read from a file and evaluated like irflow's own runs.

Formats, told apart by content (gzip-compressed or not): a TREC run (``qid Q0 docid rank score tag``),
ranx / ir_measures JSON (``{"qid": {"docid": score}}``) or a Parquet table (``query_id``, ``doc_id``,
``score``). The file's own ranks are ignored, as trec_eval ignores them: hits are ordered by
score, ties by doc id descending (``order_run``). The system's identity is the file's sha256, so
the spec names it (``run(sha256=...):/abs/path``) and a file changed since fails instead of being
evaluated under an old name.

A run is evaluated as trec_eval reads it: whole unless a depth is given (``default_depth``), documents
missing from the corpus kept at their rank (``ranking.against_dataset``). Only a regular file is read,
a MiB at a time, within ``run_limits`` (content bytes, gzip expansion, TREC line length, hits per query; a
JSON run, parsed whole, within its own smaller limit). A Parquet file is read from the file itself, its three
columns a row group at a time, after its metadata was checked against the content limit.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

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
from irflow.tasks.core.runs import CONTENT_LINE, TREC_FIELDS, has_duplicates, order_run, parse_trec
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.retrieve.base import Searcher
from irflow.tasks.retrieve.ranking import against_dataset
from irflow.tasks.systems.external import RunSpec

_CHUNK = 1 << 20
_SEGMENT = 16 << 20  # a TREC run is parsed this many bytes of whole lines at a time
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


@dataclass(frozen=True)
class RunFile:
    """A run file's rows (``query_id``, ``doc_id``, ``score``; file order), format and content hash."""

    run: pd.DataFrame
    format: str  # trec | json | parquet
    sha256: str
    compressed: bool


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


def read_run(path: str | os.PathLike[str], limits: RunLimits | None = None) -> RunFile:
    """Read a run file in any supported format; bad content raises InputError naming file, line or field.

    Only a regular file is read, in bounded steps: no more than ``limits`` allow is decompressed or
    kept, so a gzip bomb, ``/dev/zero`` or a FIFO fails at once with the limit named. A TREC run is parsed
    as it is read, 16 MiB of whole lines at a time, so its memory follows its hits, not its lines.
    """
    where = os.fspath(path)
    limits = limits or run_limits()
    with _Content(where, limits) as content:
        fmt, pieces = content.format()
        if fmt == "trec":
            run = _trec(pieces, where, content.skipped_lines + 1)
        elif fmt == "parquet" and not content.compressed:  # hashed and checked as it streams; read from the file
            for _ in pieces:
                pass
            content.fh.seek(0)
            run = _parquet(content.fh, where, limits)
        else:
            data = bytearray()
            for piece in pieces:
                data += piece
            if fmt == "parquet":
                import io

                run = _parquet(io.BytesIO(data), where, limits)
            else:
                run = _json(bytes(data), where)
            del data
        digest, compressed = content.digest.hexdigest(), content.compressed
    if run.empty:
        raise InputError(f"the run file holds no hits ({fmt})", path=where)
    if fmt == "trec" and has_duplicates(run):
        row = int(run.duplicated(["query_id", "doc_id"]).to_numpy().argmax())
        raise InputError(
            f"document appears twice for its query, got {run['doc_id'].iloc[row]!r}",
            path=where,
            line=_line_of_row(where, limits, row),
        )
    _check_hits(run, fmt, where, limits)
    return RunFile(run, fmt, digest, compressed)


class _Content:
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

    def __enter__(self) -> _Content:
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
            raise LimitError(_passed(MAX_RUN_BYTES, limits.bytes, f"the run file has {size:,} bytes"), path=where)
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
                    raise LimitError(_passed(MAX_RUN_JSON_BYTES, limits.json, what), path=where)
            total += len(piece)
            if total > limits.bytes:
                raise LimitError(_passed(MAX_RUN_BYTES, limits.bytes, "the run's content"), path=where)
            if self.fmt == "json" and total > limits.json:  # parsed whole: ~12 times its size in memory
                raise LimitError(_passed(MAX_RUN_JSON_BYTES, limits.json, "a JSON run's content"), path=where)
            if self.compressed and total > RATIO_FLOOR_BYTES and total > limits.ratio * read:
                raise InputError(
                    f"the gzip run expands {total / read:,.0f} times, more than {limits.ratio:g} (a gzip bomb? "
                    f"IRFLOW_MAX_EXTRACT_RATIO; {total:,} bytes from {read:,})",
                    path=where,
                )
            if self.fmt in (None, "trec"):
                lines, line = _line_lengths(piece, lines, line, limits.line, where)
            yield piece


def _passed(limit: Any, value: float, what: str) -> str:
    """``limit.passed(what)`` for the value ``limits`` carry (the environment's unless a caller set one)."""
    return f"{what}: more than {value:,.0f} {limit.unit} ({limit.env}; raise it to allow more)"


def _segments(pieces: Iterator[bytes], first_line: int) -> Iterator[tuple[int, int, bytes]]:
    """``(first line, first byte, text)``: the content in runs of whole lines of about 16 MiB (the last may
    lack its newline)."""
    buffer = bytearray()
    line, byte = first_line, 0
    for piece in pieces:
        buffer += piece
        if len(buffer) < _SEGMENT:
            continue
        cut = buffer.rfind(b"\n") + 1
        if cut:
            segment = bytes(buffer[:cut])
            del buffer[:cut]
            yield line, byte, segment
            line, byte = line + segment.count(b"\n"), byte + cut
    if buffer:
        yield line, byte, bytes(buffer)


def _trec(pieces: Iterator[bytes], where: str, first_line: int) -> pd.DataFrame:
    """A TREC run parsed segment by segment (a segment of blank lines costs its bytes and nothing else)."""
    parts = [
        parse_trec(segment, where, line, byte).drop(columns="rank")
        for line, byte, segment in _segments(pieces, first_line)
    ]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame({"query_id": [], "doc_id": [], "score": []})
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def _line_of_row(where: str, limits: RunLimits, row: int) -> int:
    """The 1-based line of hit ``row`` (0-based) of a TREC run, whose blank lines hold no hit: the file is
    read again (only an error needs it), a segment at a time."""
    seen = -1
    with _Content(where, limits) as content:
        _, pieces = content.format()
        for line, _, segment in _segments(pieces, content.skipped_lines + 1):
            text = segment.decode("utf-8", errors="replace")
            for match in CONTENT_LINE.finditer(text):
                seen += 1
                if seen == row:
                    return line + text.count("\n", 0, match.start())
    raise AssertionError(f"{where}: hit {row} not found again")


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


def _check_hits(run: pd.DataFrame, fmt: str, where: str, limits: RunLimits) -> None:
    """A query with more than ``limits.hits`` hits fails, naming it and where its hit ``limit + 1`` is."""
    limit = limits.hits
    counts = run["query_id"].value_counts(sort=False)
    if counts.empty or int(counts.max()) <= limit:
        return
    qid = next(str(q) for q, n in counts.items() if n > limit)
    row = int(np.flatnonzero(run["query_id"].to_numpy() == qid)[limit])
    problem = f"query {qid!r} has more than {limit:,} hits (IRFLOW_MAX_RUN_HITS)"
    if fmt == "trec":
        raise InputError(problem, path=where, line=_line_of_row(where, limits, row))
    if fmt == "json":
        raise InputError(f'field ["{qid}"]: {problem}', path=where)
    raise InputError(f"row {row + 1}: {problem}", path=where)


def _json(data: bytes, where: str) -> pd.DataFrame:
    """ranx / ir_measures JSON: ``{qid: {docid: score}}``; a key given twice in an object is an error.

    One ``json.loads``, then the columns are built without per-hit Python work: query ids repeated by
    index (pyarrow ``take``), the scores' types checked as a set and their finiteness as an array. A
    repeated key, which ``json.loads`` would silently merge, shows as fewer parsed keys than ``:`` in the
    text; only then (or when ids contain ``:``) is the file parsed again, key by key, to name it.
    """
    import pyarrow as pa

    top = _load_json(data, where, None)
    expected = 'expected {"query id": {"doc id": score, ...}, ...} (ranx / ir_measures JSON)'
    if not isinstance(top, dict):
        raise InputError(f"{expected}, got a JSON {type(top).__name__}", path=where)
    for qid, hits in top.items():
        if type(hits) is not dict:
            raise InputError(f'field ["{qid}"]: {expected}, got {type(hits).__name__}', path=where)
    counts = np.fromiter((len(hits) for hits in top.values()), dtype=np.int64, count=len(top))
    if data.count(b":") != len(top) + int(counts.sum()):
        _load_json(data, where, _unique_keys)  # raises on a repeated key (else ids merely contain ':')
    docs = list(chain.from_iterable(top.values()))
    scores = list(chain.from_iterable(hits.values() for hits in top.values()))
    score = _scores(scores)
    if score is None:
        bad = next(i for i, s in enumerate(scores) if not _finite(s))
        qids = np.repeat(np.arange(len(top)), counts)
        raise InputError(
            f'field ["{list(top)[qids[bad]]}"]["{docs[bad]}"]: score must be a finite number, got {scores[bad]!r:.40}',
            path=where,
        )
    rows = pa.array(np.repeat(np.arange(len(top), dtype=np.int64), counts))
    table = pa.table(
        {
            "query_id": pa.array(list(top), type=pa.string()).take(rows),
            "doc_id": pa.array(docs, type=pa.string()),
            "score": score,
        }
    )
    return table.to_pandas().astype({"query_id": "str", "doc_id": "str"})


def _load_json(data: bytes, where: str, hook: Any) -> Any:
    try:
        return json.loads(data, object_pairs_hook=hook)
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text at byte {exc.start}", path=where) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg} (column {exc.colno})", path=where, line=exc.lineno) from None
    except _RepeatedKey as exc:
        raise InputError(
            f'key "{exc.key}" appears twice in one object (a document twice for a query?)', path=where
        ) from None


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(items: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(items)
    if len(out) != len(items):
        seen: set[str] = set()
        raise _RepeatedKey(next(k for k, _ in items if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
    return out


def _scores(values: list[Any]) -> np.ndarray | None:
    """``values`` as float64 when every one is a finite int or float (not a bool), else None."""
    if not set(map(type, values)) <= {int, float}:
        return None
    try:
        score = np.array(values, dtype=np.float64)
    except OverflowError:  # an integer too large for a float
        return None
    return score if bool(np.isfinite(score).all()) else None


def _finite(value: Any) -> bool:
    try:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


_PARQUET_COLUMNS = ("query_id", "doc_id", "score")
_PARQUET_ROW_FLOOR = 16  # decoded bytes of one row at least: a float and two string offsets


def _parquet_table(source: Any, where: str, limits: RunLimits) -> Any:
    """The three columns of a Parquet run, a row group at a time, within ``limits.bytes`` of decoded data: the
    metadata's rows and uncompressed sizes are checked before anything is decoded (a file of a few KB can
    hold a billion dictionary-encoded rows), then each row group's ids are read dictionary-encoded and what
    they decode to is counted before they are decoded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(source)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"unreadable Parquet file: {exc}", path=where) from None
    names = parquet.schema_arrow.names
    missing = [c for c in _PARQUET_COLUMNS if c not in names]
    if missing:
        raise InputError(
            f"Parquet run lacks column(s) {', '.join(missing)}: expected query_id, doc_id, score "
            f"(found {', '.join(names)})",
            path=where,
        )
    meta = parquet.metadata
    parquet = pq.ParquetFile(source, metadata=meta, read_dictionary=["query_id", "doc_id"])  # ids kept encoded
    wanted = [i for i in range(meta.num_columns) if meta.schema.column(i).path in _PARQUET_COLUMNS]
    stored = sum(
        meta.row_group(g).column(i).total_uncompressed_size for g in range(meta.num_row_groups) for i in wanted
    )
    promised = max(stored, meta.num_rows * _PARQUET_ROW_FLOOR)
    if promised > limits.bytes:
        what = f"the Parquet run holds {meta.num_rows:,} rows, {promised:,} bytes or more decoded"
        raise LimitError(_passed(MAX_RUN_BYTES, limits.bytes, what), path=where)
    groups, decoded = [], 0
    try:
        for g in range(meta.num_row_groups):
            group = parquet.read_row_group(g, columns=list(_PARQUET_COLUMNS))
            decoded += sum(_decoded_bytes(chunk) for column in group.columns for chunk in column.chunks)
            if decoded > limits.bytes:
                what = f"the Parquet run's decoded columns (row group {g + 1} of {meta.num_row_groups})"
                raise LimitError(_passed(MAX_RUN_BYTES, limits.bytes, what), path=where)
            groups.append(pa.table({c: _plain(group.column(c)) for c in _PARQUET_COLUMNS}))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"unreadable Parquet file: {exc}", path=where) from None
    if not groups:
        return parquet.schema_arrow.empty_table().select(list(_PARQUET_COLUMNS))
    return pa.concat_tables(groups)


def _decoded_bytes(array: Any) -> int:
    """Bytes ``array`` takes once decoded: a dictionary array's values counted per row, without decoding it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(array.type):
        return int(array.nbytes)
    values = array.dictionary
    if pa.types.is_string(values.type) or pa.types.is_binary(values.type) or pa.types.is_large_string(values.type):
        sizes = pc.binary_length(values).fill_null(0)
        return int(pc.sum(sizes.take(array.indices.fill_null(0))).as_py() or 0) + 8 * len(array)
    return int(values.type.bit_width // 8 * len(array)) if hasattr(values.type, "bit_width") else int(array.nbytes)


def _plain(column: Any) -> Any:
    """A column decoded when dictionary-encoded (after :func:`_decoded_bytes` counted what that costs)."""
    import pyarrow as pa

    if pa.types.is_dictionary(column.type):
        return pa.chunked_array([chunk.dictionary_decode() for chunk in column.chunks], type=column.type.value_type)
    return column


def _parquet(source: Any, where: str, limits: RunLimits) -> pd.DataFrame:
    """A Parquet run table: ``query_id``, ``doc_id``, ``score`` (other columns, e.g. ``rank``, never read)."""
    table = _parquet_table(source, where, limits)
    frame = table.to_pandas()
    for column in ("query_id", "doc_id"):
        if frame[column].isna().any():
            row = int(frame[column].isna().to_numpy().argmax())
            raise InputError(f"field {column} of row {row + 1}: expected an id, got null", path=where)
    if not (pd.api.types.is_numeric_dtype(frame["score"]) and not pd.api.types.is_bool_dtype(frame["score"])):
        raise InputError(
            f"field score: expected numbers, got column type {table.schema.field('score').type}", path=where
        )
    score = frame["score"].to_numpy(dtype="float64", na_value=math.nan)
    bad = ~np.isfinite(score)
    if bad.any():
        row = int(bad.argmax())
        raise InputError(f"field score of row {row + 1}: expected a finite number, got {score[row]!r}", path=where)
    run = pd.DataFrame(
        {"query_id": frame["query_id"].astype("str"), "doc_id": frame["doc_id"].astype("str"), "score": score}
    )
    if has_duplicates(run):
        row = int(run.duplicated(["query_id", "doc_id"]).to_numpy().argmax())
        raise InputError(
            f"row {row + 1}: document {run['doc_id'].iloc[row]!r} appears twice for query "
            f"{run['query_id'].iloc[row]!r}",
            path=where,
        )
    return run


class RunFileSearcher(Searcher[RunSpec]):
    """The file's hits for the queries asked, cut to the depth (by default none: trec_eval reads every line);
    read and checked once."""

    def __init__(self, dataset: Dataset, spec: RunSpec) -> None:
        super().__init__(dataset, spec)
        start = time.perf_counter()
        loaded = read_run(spec.path)
        if not loaded.sha256.startswith(spec.sha256):
            raise InputError(
                f"the file changed since this system was named (sha256 {loaded.sha256[: len(spec.sha256)]}, the "
                f"spec says {spec.sha256}): evaluate it as a new system, run:{spec.path}",
                path=spec.path,
            )
        kept, counts = against_dataset(dataset, loaded.run, spec.path)
        self.run = order_run(kept)
        self.info.update(
            run_path=spec.path,
            run_sha256=loaded.sha256,
            run_format=loaded.format + (".gz" if loaded.compressed else ""),
            run_hits=len(loaded.run),
            run_depth=int(self.run["rank"].max()),
            run_load_seconds=time.perf_counter() - start,
            **counts,
        )

    def default_depth(self) -> int:
        return int(self.info["run_depth"])

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        run = self.run[self.run["rank"] <= depth]
        if queries is not self.dataset.queries:
            run = run[run["query_id"].isin(queries["query_id"].astype(str))]
        return run.reset_index(drop=True)
