"""``run:<path>``: a ranking produced elsewhere, read from a file and evaluated like irflow's own runs.

Formats, told apart by content (gzip-compressed or not): a TREC run (``qid Q0 docid rank score tag``),
ranx / ir_measures JSON (``{"qid": {"docid": score}}``) or a Parquet table (``query_id``, ``doc_id``,
``score``). The file's own ranks are ignored, as trec_eval ignores them: hits are ordered by
score, ties by doc id descending (``order_run``). The system's identity is the file's sha256, so
the spec names it (``run(sha256=...):/abs/path``) and a file changed since fails instead of being
evaluated under an old name.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.runs import has_duplicates, order_run, parse_trec
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.retrieve.base import Searcher
from irflow.tasks.retrieve.ranking import against_dataset
from irflow.tasks.systems.external import RunSpec


@dataclass(frozen=True)
class RunFile:
    """A run file's rows (``query_id``, ``doc_id``, ``score``; file order), format and content hash."""

    run: pd.DataFrame
    format: str  # trec | json | parquet
    sha256: str
    compressed: bool


def read_run(path: str | os.PathLike[str]) -> RunFile:
    """Read a run file in any supported format; bad content raises InputError naming file, line or field."""
    where = os.fspath(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read run file: {exc.strerror}", path=where) from None
    digest = hashlib.sha256(data).hexdigest()
    compressed = data[:2] == b"\x1f\x8b"
    if compressed:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise InputError(f"damaged gzip data: {exc}", path=where) from None
    if data[:4] == b"PAR1":
        fmt, run = "parquet", _parquet(data, where)
    elif data.lstrip()[:1] == b"{":
        fmt, run = "json", _json(data, where)
    else:
        fmt, run = "trec", parse_trec(data, where).drop(columns="rank")
    if run.empty:
        raise InputError(f"the run file holds no hits ({fmt})", path=where)
    return RunFile(run, fmt, digest, compressed)


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


def _parquet(data: bytes, where: str) -> pd.DataFrame:
    """A Parquet run table: ``query_id``, ``doc_id``, ``score`` (other columns, e.g. ``rank``, ignored)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except (pa.ArrowException, OSError) as exc:
        raise InputError(f"unreadable Parquet file: {exc}", path=where) from None
    missing = [c for c in ("query_id", "doc_id", "score") if c not in table.column_names]
    if missing:
        raise InputError(
            f"Parquet run lacks column(s) {', '.join(missing)}: expected query_id, doc_id, score "
            f"(found {', '.join(table.column_names)})",
            path=where,
        )
    frame = table.select(["query_id", "doc_id", "score"]).to_pandas()
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
    """The file's hits for the queries asked, cut to the depth; read and checked once."""

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

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        run = self.run[self.run["rank"] <= depth]
        if queries is not self.dataset.queries:
            run = run[run["query_id"].isin(queries["query_id"].astype(str))]
        return run.reset_index(drop=True)
