"""Custom sources: JSONL/CSV/Parquet tables with a column mapping, zbench JSONL, TREC qrels.

Tables: a folder holding ``corpus.<ext>``, ``queries.<ext>`` and the judgements, either as
``qrels.<ext>`` (columns query_id, doc_id, relevance) or as a qrels text file (``qrels.tsv`` /
``qrels.txt``, BEIR or TREC layout). ``mapping`` maps canonical fields to source columns, e.g.
``{"corpus.doc_id": "id", "corpus.text": "body", "qrels.relevance": "score"}``; unmapped
source columns become metadata.

zbench: ``QueryDocuments`` lines (a query and its candidate documents, no judgements) become a
dataset with a ``candidates`` table, ready for annotation. ``AnnotatedQueryDocuments`` lines carry a
``score`` per document: integer scores are used as grades as they are (human labels); real-valued
zELO scores become grades per query from ``p = exp(score - max score of the query)``, the
Bradley–Terry strength relative to the query's best document: grade 3 if p ≥ 0.5, 2 if p ≥ 0.25,
1 if p ≥ 0.1, else 0 (thresholds configurable).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.ingest.canonical import CorpusSource, SplitSource
from irflow.tasks.ingest.readers import (
    iter_jsonl,
    iter_lines,
    open_source,
    parse_grade,
    read_qrels,
    require_id,
    require_text,
)
from irflow.tasks.ingest.records import DocRecord, QueryRecord, is_missing

DEFAULT_GRADE_THRESHOLDS = (0.5, 0.25, 0.1)
_DEFAULTS = {
    "corpus": {"doc_id": ("doc_id", "_id", "id"), "title": ("title",), "text": ("text", "content", "body")},
    "queries": {"query_id": ("query_id", "_id", "id", "qid"), "text": ("text", "query")},
    "qrels": {
        "query_id": ("query_id", "query-id", "qid"),
        "doc_id": ("doc_id", "corpus-id", "docid"),
        "relevance": ("relevance", "score", "grade", "label"),
    },
}
_OPTIONAL = {("corpus", "title")}


# ----------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class TableFiles:
    fmt: str
    corpus: Path
    queries: Path
    qrels: Path

    @classmethod
    def find(cls, folder: Path, fmt: str) -> TableFiles:
        if not folder.is_dir():
            raise InputError(
                f"--format {fmt} expects a folder with corpus.{fmt}, queries.{fmt} and qrels", path=str(folder)
            )
        found = {}
        for table in ("corpus", "queries", "qrels"):
            names = [f"{table}.{fmt}"] + (["qrels.tsv", "qrels.txt", "qrels.trec"] if table == "qrels" else [])
            path = next((folder / n for n in names if (folder / n).is_file()), None)
            if path is None:
                raise InputError(f"missing {table} file; expected one of {', '.join(names)}", path=str(folder))
            found[table] = path
        return cls(fmt=fmt, **found)


def _records(path: Path, fmt: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, row)`` from a JSONL, CSV (header line; line = physical line) or Parquet (line = row + 1) file.

    A CSV row with fewer or more fields than its header is an error naming the line (``csv`` would
    fill the gap with None or gather the extra fields under a column named None).
    """
    if fmt == "jsonl":
        yield from iter_jsonl(path)
    elif fmt == "csv":
        for _ in iter_lines(path):  # reports invalid UTF-8 with its byte offset, and folders, before csv parses
            pass
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            try:
                header = next(reader)
                for row in reader:
                    if not row:
                        continue
                    if len(row) != len(header):
                        raise InputError(
                            f"{len(row)} fields, expected {len(header)} as in the header ({', '.join(header)})",
                            path=str(path),
                            line=reader.line_num,
                        )
                    yield reader.line_num, dict(zip(header, row))
            except StopIteration:
                return
            except csv.Error as err:
                raise InputError(f"malformed CSV ({err})", path=str(path), line=reader.line_num) from None
    elif fmt == "parquet":
        open_source(path).close()  # a folder or an unreadable path: a named error
        try:
            frame = pd.read_parquet(path)
        except Exception as err:  # pyarrow raises ArrowInvalid, OSError, ... for a damaged file
            raise InputError(
                f"not a readable Parquet file ({type(err).__name__}: {str(err)[:200]}); expected a Parquet table",
                path=str(path),
            ) from None
        for i, row in enumerate(frame.to_dict("records"), 1):
            yield i, row


def _resolve_columns(
    table: str, row: dict[str, Any], mapping: dict[str, str], path: Path, line: int
) -> dict[str, str | None]:
    columns: dict[str, str | None] = {}
    for field, candidates in _DEFAULTS[table].items():
        mapped = mapping.get(f"{table}.{field}")
        if mapped is not None:
            if mapped not in row:
                raise InputError(
                    f"mapped column {mapped!r} for {table}.{field} not found; columns: {', '.join(map(str, row))}",
                    path=str(path),
                    line=line,
                )
            columns[field] = mapped
            continue
        columns[field] = next((c for c in candidates if c in row), None)
        if columns[field] is None and (table, field) not in _OPTIONAL:
            raise InputError(
                f"missing required field '{field}' (looked for {', '.join(candidates)}; map another "
                f"column with --map {table}.{field}=COLUMN)",
                path=str(path),
                line=line,
            )
    return columns


def _split_row(
    table: str,
    row: dict[str, Any],
    mapping: dict[str, str],
    path: Path,
    line: int,
    columns: dict[str, str | None] | None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, str | None]]:
    columns = columns or _resolve_columns(table, row, mapping, path, line)
    used = {c for c in columns.values() if c}
    values = {field: (row.get(col) if col else None) for field, col in columns.items()}
    for col in columns.values():
        if col and col not in row:
            raise InputError(f"missing required field '{col}'", path=str(path), line=line)
    meta = {k: v for k, v in row.items() if k not in used and not is_missing(v)}
    return values, meta, columns


def _as_id(value: Any, field: str, path: Path, line: int) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return require_id({field: value}, field, path, line)


def corpus_source(path: Path, mapping: dict[str, str]) -> CorpusSource:
    """The documents of a corpus table, streamed."""
    fmt = path.suffix.lstrip(".")

    def records() -> Iterator[DocRecord]:
        columns = None
        for line, row in _records(path, fmt):
            values, meta, columns = _split_row("corpus", row, mapping, path, line, columns)
            yield (
                _as_id(values["doc_id"], "doc_id", path, line),
                require_text({"title": values.get("title")}, "title", path, line, required=False),
                require_text({"text": values["text"]}, "text", path, line),
                meta or None,
                line,
            )

    return CorpusSource(str(path), records())


def _grade(value: Any, path: Path, line: int) -> int:
    """A grade cell: an int, an integral float, or integer text (``true`` is not a grade)."""
    if isinstance(value, bool):
        raise InputError(f"relevance grade {value!r} is not an integer", path=str(path), line=line)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise InputError(f"relevance grade {value!r} is not an integer", path=str(path), line=line)
        return int(value)
    if isinstance(value, str):
        return parse_grade(value[:-2] if value.endswith(".0") else value, path, line)
    raise InputError(f"relevance grade {value!r} is not an integer", path=str(path), line=line)


def read_split(files: TableFiles, split: str, mapping: dict[str, str]) -> SplitSource:
    queries, columns = [], None
    for line, row in _records(files.queries, files.fmt):
        values, meta, columns = _split_row("queries", row, mapping, files.queries, line, columns)
        queries.append(
            (
                _as_id(values["query_id"], "query_id", files.queries, line),
                require_text({"text": values["text"]}, "text", files.queries, line),
                meta or None,
                line,
            )
        )
    if files.qrels.suffix.lstrip(".") != files.fmt:
        qrels = read_qrels(files.qrels)
    else:
        qrels, columns = [], None
        for line, row in _records(files.qrels, files.fmt):
            values, _, columns = _split_row("qrels", row, mapping, files.qrels, line, columns)
            qrels.append(
                (
                    _as_id(values["query_id"], "query_id", files.qrels, line),
                    _as_id(values["doc_id"], "doc_id", files.qrels, line),
                    _grade(values["relevance"], files.qrels, line),
                    line,
                )
            )
    return SplitSource(
        split=split, queries=queries, qrels=qrels, queries_source=str(files.queries), qrels_source=str(files.qrels)
    )


# ----------------------------------------------------------------------------- zbench


@dataclass
class ZbenchFile:
    """A parsed zbench file: documents, queries, judgements (annotated) or candidates (not)."""

    path: Path
    documents: dict[str, tuple[str, dict[str, Any] | None, int]]
    queries: list[tuple[str, str, dict[str, Any] | None, int]]
    qrels: list[tuple[str, str, int, int]]
    candidates: pd.DataFrame
    unjudged: bool
    grading: str

    def corpus_source(self) -> CorpusSource:
        records = ((d, "", content, meta, line) for d, (content, meta, line) in self.documents.items())
        return CorpusSource(str(self.path), records)

    def split(self, name: str) -> SplitSource:
        return SplitSource(
            split=name,
            queries=self.queries,
            qrels=self.qrels,
            queries_source=str(self.path),
            qrels_source=str(self.path),
            candidates=self.candidates if self.unjudged else None,
        )


def read_zbench(path: Path, grade_thresholds: tuple[float, ...] | None = None) -> ZbenchFile:
    """Parse zbench ``QueryDocuments`` / ``AnnotatedQueryDocuments`` JSONL (see module docstring)."""
    thresholds = tuple(sorted(grade_thresholds or DEFAULT_GRADE_THRESHOLDS, reverse=True))
    documents: dict[str, tuple[str, dict[str, Any] | None, int]] = {}
    queries: list[QueryRecord] = []
    scored: list[tuple[str, str, float, int]] = []
    candidates: list[tuple[str, str, int]] = []
    for line, obj in iter_jsonl(path):
        query = obj.get("query")
        if not isinstance(query, dict):
            raise InputError(
                "missing required field 'query' (an object with 'id' and 'query')", path=str(path), line=line
            )
        qid = require_id(query, "id", path, line)
        queries.append((qid, require_text(query, "query", path, line), None, line))
        docs = obj.get("documents")
        if not isinstance(docs, list):
            raise InputError("missing required field 'documents' (a list)", path=str(path), line=line)
        for rank, doc in enumerate(docs, 1):
            if not isinstance(doc, dict):
                raise InputError(f"documents[{rank - 1}] must be an object", path=str(path), line=line)
            did = require_id(doc, "id", path, line)
            content = require_text(doc, "content", path, line)
            if did in documents and documents[did][0] != content:
                raise InputError(
                    f"document id {did!r} appears with different content (first on line {documents[did][2]})",
                    path=str(path),
                    line=line,
                )
            metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else None
            documents.setdefault(did, (content, metadata, line))
            candidates.append((qid, did, rank))
            if "score" in doc:
                score = doc["score"]
                if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
                    raise InputError(
                        f"documents[{rank - 1}].score must be a finite number, got {score!r}", path=str(path), line=line
                    )
                scored.append((qid, did, float(score), line))
    if not documents:
        raise InputError("the corpus is empty; expected documents in each line", path=str(path))
    frame = pd.DataFrame(candidates, columns=["query_id", "doc_id", "rank"]).astype(
        {"query_id": "str", "doc_id": "str", "rank": "int64"}
    )
    if not scored:
        return ZbenchFile(path, documents, queries, [], frame, True, "none: QueryDocuments carry no judgements")
    if all(s.is_integer() for _, _, s, _ in scored):
        qrels = [(q, d, int(s), line) for q, d, s, line in scored]
        return ZbenchFile(path, documents, queries, qrels, frame, False, "integer scores used as grades")
    best: dict[str, float] = {}
    for q, _, s, _ in scored:
        best[q] = max(best.get(q, -math.inf), s)
    qrels = []
    for q, d, s, line in scored:
        p = math.exp(s - best[q])
        grade = next((len(thresholds) - i for i, t in enumerate(thresholds) if p >= t), 0)
        qrels.append((q, d, grade, line))
    grading = (
        "zELO scores to grades per query: p = exp(score - best score); grade "
        + ", ".join(f"{len(thresholds) - i} if p >= {t}" for i, t in enumerate(thresholds))
        + ", else 0"
    )
    return ZbenchFile(path, documents, queries, qrels, frame, False, grading)


# ----------------------------------------------------------------------------- TREC qrels


def qrels_over_base(path: Path, base: Dataset, split: str) -> tuple[CorpusSource, SplitSource, dict[str, Any]]:
    """New judgements (TREC or BEIR qrels file) over the corpus and queries of dataset ``base``.

    Queries come from the base split, so judgements of queries outside it are reported as unknown.
    Returns the corpus, the split and the provenance to add to the source.
    """
    rows = read_qrels(path)
    split_source = SplitSource(split, base_queries(base), rows, f"{base.name} queries", str(path))
    return base_corpus(base), split_source, base_provenance(base)


def base_corpus(base: Dataset) -> CorpusSource:
    """The documents of dataset ``base``, as records for a dataset built over it."""
    meta_cols = [c for c in base.corpus.columns if c not in ("doc_id", "title", "text")]

    def documents() -> Iterator[DocRecord]:
        for i, rec in enumerate(base.corpus.to_dict("records"), 1):
            meta = {c: rec[c] for c in meta_cols if not is_missing(rec[c])}
            yield rec["doc_id"], rec["title"], rec["text"], meta or None, i

    return CorpusSource(f"{base.name} corpus", documents())


def base_queries(base: Dataset) -> list[QueryRecord]:
    """The queries of dataset ``base`` (with their metadata), as records."""
    q_meta = [c for c in base.queries.columns if c not in ("query_id", "text")]
    return [
        (r["query_id"], r["text"], {c: r[c] for c in q_meta if not is_missing(r[c])} or None, i)
        for i, r in enumerate(base.queries.to_dict("records"), 1)
    ]


def base_provenance(base: Dataset) -> dict[str, Any]:
    return {"base": base.name, "base_split": base.split, "base_fingerprint": base.fingerprint}
