"""JSON and Parquet run files parsed into run tables (``query_id``, ``doc_id``, ``score``), every error naming
the field or row: ranx / ir_measures JSON in one ``json.loads`` without per-hit Python work, a Parquet run a row
group at a time within the content limit. (TREC runs are parsed segment by segment in ``runfile``.)"""

from __future__ import annotations

import json
import math
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.limits import MAX_RUN_BYTES, LimitError
from irflow.tasks.core.runs import has_duplicates
from irflow.tasks.core.schema import InputError
from irflow.tasks.retrieve.runfile_bytes import RunLimits, limit_passed


def parse_json_run(data: bytes, where: str) -> pd.DataFrame:
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
        raise LimitError(limit_passed(MAX_RUN_BYTES, limits.bytes, what), path=where)
    groups, decoded = [], 0
    try:
        for g in range(meta.num_row_groups):
            group = parquet.read_row_group(g, columns=list(_PARQUET_COLUMNS))
            decoded += sum(_decoded_bytes(chunk) for column in group.columns for chunk in column.chunks)
            if decoded > limits.bytes:
                what = f"the Parquet run's decoded columns (row group {g + 1} of {meta.num_row_groups})"
                raise LimitError(limit_passed(MAX_RUN_BYTES, limits.bytes, what), path=where)
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


def parse_parquet_run(source: Any, where: str, limits: RunLimits) -> pd.DataFrame:
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


__all__ = ["parse_json_run", "parse_parquet_run"]
