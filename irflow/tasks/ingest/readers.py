"""Line-exact readers for the source formats: JSONL, TSV, qrels (BEIR and TREC layouts).

Every reader streams and reports bad input with the file, the 1-based line number and what was
expected; undecodable bytes are reported with their byte offset. Files are split on ``\\n``
only (JSON strings may legally contain U+2028), and a trailing ``\\r`` is stripped (BEIR qrels
use CRLF).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from irflow.tasks.core.limits import open_regular
from irflow.tasks.core.paths import regular_file
from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest.records import MAX_GRADE, MIN_GRADE, unicode_error


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for every line, decoded as strict UTF-8."""
    offset = 0
    with open_source(path) as fh:
        for number, raw in enumerate(fh, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise InputError(
                    f"invalid UTF-8 byte 0x{raw[err.start]:02x} at byte offset {offset + err.start}; "
                    "expected UTF-8 text",
                    path=str(path),
                    line=number,
                ) from None
            offset += len(raw)
            if number == 1 and text.startswith("\ufeff"):
                text = text[1:]
            yield number, text.rstrip("\r\n")


def open_source(path: str | Path) -> BinaryIO:
    """Open a source file for reading; anything but a regular file (a folder, a device, a FIFO) or an unreadable
    path is an :class:`InputError` saying what the path is."""
    return open_regular(path, "a readable file")


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for every non-blank line; each line must be one JSON object."""
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(
                f"malformed JSON ({err.msg} at column {err.colno}); expected one JSON object per line",
                path=str(path),
                line=number,
            ) from None
        except (ValueError, RecursionError) as err:  # e.g. an integer past Python's 4300-digit limit
            raise InputError(
                f"unreadable JSON value ({err}); expected one JSON object per line", path=str(path), line=number
            ) from None
        if not isinstance(obj, dict):
            raise InputError(f"expected a JSON object, got {type(obj).__name__}", path=str(path), line=number)
        yield number, obj


def require_id(obj: dict[str, Any], field: str, path: str | Path, line: int) -> str:
    """The id in ``obj[field]`` as a string (integers are accepted and converted; ids are strings)."""
    if field not in obj or obj[field] is None:
        raise InputError(f"missing required field '{field}'", path=str(path), line=line)
    value = obj[field]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InputError(
            f"field '{field}' must be a string id, got {type(value).__name__} {value!r}",
            path=str(path),
            line=line,
        )
    value = str(value)
    if not value:
        raise InputError(f"field '{field}' is an empty id", path=str(path), line=line)
    return value


def require_text(obj: dict[str, Any], field: str, path: str | Path, line: int, *, required: bool = True) -> str:
    """The string in ``obj[field]``; a missing optional field (or null) gives ``""``."""
    value = obj.get(field)
    if value is None:
        if required and field not in obj:
            raise InputError(f"missing required field '{field}'", path=str(path), line=line)
        return ""
    if not isinstance(value, str):
        raise InputError(f"field '{field}' must be a string, got {type(value).__name__}", path=str(path), line=line)
    return value


_INT_RE = re.compile(r"^[+-]?[0-9]+$")


def parse_grade(text: str, path: str | Path, line: int) -> int:
    """A grade written as decimal digits; its range is checked by the canonical builder."""
    text = text.strip()
    if not _INT_RE.match(text):
        raise InputError(f"relevance grade {text!r} is not an integer", path=str(path), line=line)
    digits = len(text.lstrip("+-"))
    if digits > 30:  # past any valid grade, and past int()'s digit limit long before that
        raise InputError(
            f"relevance grade {text[:12]}... ({digits} digits) is out of range; "
            f"expected an integer from {MIN_GRADE} (judged not relevant) to {MAX_GRADE}",
            path=str(path),
            line=line,
        )
    return int(text)


def read_qrels(path: str | Path) -> list[tuple[str, str, int, int]]:
    """Read a qrels file: ``(query_id, doc_id, grade, line)`` per judgement.

    Two layouts are recognised per line: BEIR's ``query-id<TAB>corpus-id<TAB>score`` (a header
    line naming the columns is skipped) and TREC's ``qid iter docid grade`` (whitespace separated).
    """
    rows: list[tuple[str, str, int, int]] = []
    first = True
    for number, line in iter_lines(path):
        if not line.strip():
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) == 4:  # TREC: qid iteration docid grade
            query_id, _, doc_id, grade = fields
        elif len(fields) == 3:
            query_id, doc_id, grade = fields
        else:
            raise InputError(
                f"expected 3 tab-separated fields (query-id, corpus-id, score) or 4 TREC fields "
                f"(qid, iter, docid, grade), got {len(fields)}",
                path=str(path),
                line=number,
            )
        query_id, doc_id, grade = query_id.strip(), doc_id.strip(), grade.strip()
        if first:
            first = False
            if _is_header(query_id, grade):
                continue
        value = parse_grade(grade, path, number)
        if not query_id or not doc_id:
            raise InputError("empty query or document id", path=str(path), line=number)
        rows.append((query_id, doc_id, value, number))
    return rows


def _is_header(query_id: str, grade: str) -> bool:
    """A header names its columns: a non-numeric grade field next to an id field called like one."""
    try:
        int(grade)
        return False
    except ValueError:
        return query_id.lower().replace("_", "-") in {"query-id", "qid", "query", "queryid"}


LOG_CHUNK_ROWS = 200_000
"""Rows of a log read at a time by :func:`iter_log_table`."""


def iter_log_table(
    path: str | Path, what: str, wanted: Any, chunk_rows: int = LOG_CHUNK_ROWS
) -> tuple[list[str], Iterator[Any]]:
    """A log's column names and its rows as DataFrames of at most ``chunk_rows`` rows, holding only the columns
    ``wanted`` (a predicate on a name), numbered on from the previous chunk (the index is the 0-based row of
    the file); CSV, TSV, JSONL or Parquet as :func:`read_log_table` reads them, so memory follows the chunk."""
    import pandas as pd
    import pyarrow.parquet as pq

    path = Path(path)
    suffix = _log_suffix(path, what)
    try:
        if suffix == ".parquet":
            parquet = pq.ParquetFile(path)
            names = list(parquet.schema_arrow.names)
            chosen = [n for n in names if wanted(n)]
            chunks: Iterator[Any] = (b.to_pandas() for b in parquet.iter_batches(chunk_rows, columns=chosen))
        elif suffix in (".jsonl", ".json"):
            _check_json_surrogates(path)
            reader = pd.read_json(path, lines=True, dtype=False, chunksize=chunk_rows)
            first = next(iter(reader), None)
            names = [] if first is None else list(map(str, first.columns))
            chunks = (c[[n for n in c.columns if wanted(str(n))]] for c in ([first] if first is not None else []))
            chunks = chain(chunks, (c[[n for n in c.columns if wanted(str(n))]] for c in reader))
        else:
            sep = "," if suffix == ".csv" else "\t"
            try:
                names = list(pd.read_csv(path, sep=sep, dtype=str, nrows=0).columns)
            except pd.errors.EmptyDataError:  # not even a header: an empty table, which the caller reports
                return [], iter(())
            chunks = iter(
                pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False, usecols=wanted, chunksize=chunk_rows)
            )
    except InputError:
        raise
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the {what}: {exc}", path=str(path)) from None
    return names, _numbered(chunks, path, what)


def _numbered(chunks: Iterator[Any], path: Path, what: str) -> Iterator[Any]:
    """Each chunk with the file's 0-based row numbers as its index; a read error names the file."""
    import pandas as pd

    start = 0
    while True:
        try:
            chunk = next(chunks, None)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the {what}: {exc}", path=str(path)) from None
        if chunk is None:
            return
        chunk.index = pd.RangeIndex(start, start + len(chunk))
        start += len(chunk)
        yield chunk


def _log_suffix(path: Path, what: str) -> str:
    regular_file(path, f"a {what} (CSV, TSV, JSONL or Parquet)")
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".jsonl", ".json", ".csv", ".tsv", ".txt"):
        raise InputError(f"unknown {what} format {suffix!r}; expected .csv, .tsv, .jsonl or .parquet", path=str(path))
    return suffix


def read_log_table(path: str | Path, what: str) -> Any:
    """A log file as a DataFrame (CSV, TSV, JSONL or Parquet, by its suffix; text columns as strings);
    an unknown suffix or an unreadable file is an InputError naming the file and ``what`` it is."""
    import pandas as pd

    path = Path(path)
    suffix = _log_suffix(path, what)
    try:
        if suffix == ".parquet":
            return pd.read_parquet(path)
        if suffix in (".jsonl", ".json"):
            _check_json_surrogates(path)
            return pd.read_json(path, lines=True, dtype=False)
        return pd.read_csv(path, sep="," if suffix == ".csv" else "\t", dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:  # not even a header: an empty table, which the caller reports
        return pd.DataFrame()
    except InputError:
        raise
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the {what}: {exc}", path=str(path)) from None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _check_json_surrogates(path: Path) -> None:
    """pandas' JSON reader silently drops a lone surrogate (``"\\ud800"``); the dataset import refuses it,
    and so does a log: the first one fails naming the file, the line and the field. Lines are parsed one
    by one only when the file holds a surrogate escape at all (a valid pair holds two); the file is searched
    16 MiB at a time."""
    with path.open("rb") as fh:
        tail = b""
        while block := fh.read(16 << 20):
            if _SURROGATE_ESCAPE.search(tail + block):
                break
            tail = block[-5:]  # an escape cut by the block's end
        else:
            return
        fh.seek(0)
        for number, line in enumerate(fh, start=1):
            if not _SURROGATE_ESCAPE.search(line):
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # pandas names the malformed line
            fields = record if isinstance(record, dict) else {"value": record}
            try:
                json.dumps(fields, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise unicode_error(fields, str(path), number) from None


def fail_at_row(bad: Any, name: str, expected: str, table: Any, path: str | Path) -> NoReturn:
    """Raise the InputError for the first row where ``bad`` (a boolean Series) is true: file, row, field, value."""
    import numpy as np

    first = int(np.flatnonzero(bad.to_numpy())[0])
    label = bad.index[first]  # the file's 0-based row when the table is a chunk of it (iter_log_table)
    row = int(label) if isinstance(label, (int, np.integer)) else first
    raise InputError(
        f"row {row + 1}: field {name!r} is {table[name].iloc[first]!r}; expected {expected}", path=str(path)
    )


def utc_time_column(table: Any, name: str, path: str | Path, expected: str) -> Any:
    """A log column as UTC timestamps (datetimes as they are, text as ISO 8601); any other value fails
    naming the file, row and field, with ``expected`` saying what was expected."""
    import pandas as pd

    column = table[name]
    if pd.api.types.is_datetime64_any_dtype(column):
        parsed = column.dt.tz_localize("UTC") if column.dt.tz is None else column.dt.tz_convert("UTC")
    else:
        strings = column.map(lambda v: v.strip() if isinstance(v, str) else "")
        parsed = pd.to_datetime(strings, utc=True, format="ISO8601", errors="coerce")
    if parsed.isna().any():
        fail_at_row(parsed.isna(), name, expected, table, path)
    return parsed


def integer_column(column: Any, name: str, path: str | Path, minimum: int) -> Any:
    """A log column as int64 values >= ``minimum``; any other value fails naming the file, row and field."""
    import numpy as np
    import pandas as pd

    values = pd.to_numeric(column, errors="coerce")
    bad = values.isna() | (values != values.round()) | (values < minimum) | (values >= 2**63)
    if bad.any():
        fail_at_row(bad, name, f"an integer from {minimum} to 2**63-1", column.to_frame(name), path)
    total = values.to_numpy(np.float64).cumsum()  # sums of counts are int64 too (manifests, sampling weights)
    if total[-1:].size and total[-1] >= 2**63:
        row = int(np.argmax(total >= 2**63)) + 1
        raise InputError(
            f"row {row}: the {name} values up to this row add up to more than 2**63-1; expected a total that fits",
            path=str(path),
        )
    return values.astype(np.int64)
