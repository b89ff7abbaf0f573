"""The canonical dataset builder: check every record, fingerprint, write the tables into a folder.

Ingestion runs one way: a source reader yields records (each with its file and line) → this
module checks them and writes every table into a temporary folder → ``store.publish`` renames
the folder into the store. Nothing here knows where the store is.

Layout of a built dataset folder (one corpus, one folder per split)::

    corpus.parquet   doc_id, title, text, metadata columns...
    corpus.json      row count, content digest, metadata columns, source
    <split>/queries.parquet   query_id, text, metadata columns...   (judged queries of the split)
    <split>/qrels.parquet     query_id, doc_id, relevance
    <split>/manifest.json     source, split, counts, grades, fingerprint, irflow version, ...

The corpus is streamed to Parquet in batches: an 8.8M-passage collection never becomes Python
objects all at once.

Checks: ids and texts are strings of valid Unicode (a lone surrogate such as ``"\\ud800"`` is an
error naming its file and line), document and query ids are unique and hold no whitespace (run files
separate their fields by it), every grade is an integer
from :data:`MIN_GRADE` to :data:`MAX_GRADE`, and each split keeps at least one judgement of a known
query. Judgements of unknown queries are counted and dropped (they cannot be run); judgements of
documents absent from the corpus are kept, as trec_eval and BEIR keep them (the document is relevant
and unretrievable, its query stays in the mean), and reported in the manifest's ``missing_documents``;
an import may drop them instead (``drop_missing_documents``).

Fingerprint: an order-independent sha256 over the rows of the three tables (each row hashed,
digests summed mod 2^256, then hashed with the table names and counts). Two ingestions of the
same content — by any route — give the same fingerprint; any change to an id, text, grade or
metadata value changes it.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.config import irflow_version
from irflow.tasks.core.schema import InputError, Manifest
from irflow.tasks.ingest.qrels import clean_qrels
from irflow.tasks.ingest.records import (
    DocRecord,
    QrelRow,
    QueryRecord,
    is_missing,
    metadata_json,
    unicode_error,
)
from irflow.tasks.ingest.store import check_split

log = logging.getLogger(__name__)

BATCH_ROWS = 50_000
# 2: judgements of documents absent from the corpus are kept (1 dropped them). A stored catalog or
# embedded dataset of an older format that dropped some is rebuilt on first use.
STORE_FORMAT = 2
_REQUIRED = {"corpus": ("doc_id", "title", "text"), "queries": ("query_id", "text")}


# ----------------------------------------------------------------------------- fingerprint


class ContentDigest:
    """Order-independent digest of a table's rows: sum of per-row sha256 values mod 2^256."""

    def __init__(self) -> None:
        self.total = 0
        self.rows = 0

    def add(self, values: Iterable[str]) -> None:
        """Add one row; raises ``UnicodeEncodeError`` for text that is not valid Unicode (a lone surrogate)."""
        row = "\x1f".join(values).encode("utf-8")
        self.total = (self.total + int.from_bytes(hashlib.sha256(row).digest(), "big")) & ((1 << 256) - 1)
        self.rows += 1

    def hexdigest(self) -> str:
        return f"{self.total:064x}"


def fingerprint(corpus_digest: str, corpus_rows: int, queries: pd.DataFrame, qrels: pd.DataFrame) -> str:
    """sha256 over the three tables' content digests and row counts (see module docstring)."""
    q = ContentDigest()
    meta_cols = [c for c in queries.columns if c not in _REQUIRED["queries"]]
    for rec in queries.to_dict("records"):
        meta = {c: rec[c] for c in meta_cols if not is_missing(rec[c])}
        q.add((rec["query_id"], rec["text"], metadata_json(meta)))
    r = ContentDigest()
    for qid, did, rel in zip(qrels["query_id"], qrels["doc_id"], qrels["relevance"]):
        r.add((qid, did, str(int(rel))))
    h = hashlib.sha256(b"irflow-dataset-v1\n")
    for name, digest, rows in (
        ("corpus", corpus_digest, corpus_rows),
        ("queries", q.hexdigest(), q.rows),
        ("qrels", r.hexdigest(), r.rows),
    ):
        h.update(f"{name}\t{rows}\t{digest}\n".encode())
    return h.hexdigest()


# ----------------------------------------------------------------------------- corpus


@dataclass
class CorpusSummary:
    rows: int
    digest: str
    metadata_columns: list[str] = field(default_factory=list)


class CorpusWriter:
    """Stream corpus records into ``corpus.parquet``: batched writes, content digest, id checks.

    Metadata dicts are kept aside only for the rows that have any, and become columns at the end
    (nested values as JSON text; a key colliding with a required column is prefixed ``metadata.``).
    """

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self.digest = ContentDigest()
        self._ids: list[str] = []
        self._titles: list[str] = []
        self._texts: list[str] = []
        self._metadata: list[tuple[int, dict[str, Any]]] = []
        self._writer: Any = None

    def add(
        self, doc_id: str, title: str, text: str, metadata: dict[str, Any] | None = None, line: int | None = None
    ) -> None:
        if doc_id.split() != [doc_id]:
            raise id_error("document", doc_id, self.source, line)
        try:
            self.digest.add((doc_id, title, text, metadata_json(metadata)))
        except UnicodeEncodeError:
            fields = {"_id": doc_id, "title": title, "text": text, "metadata": metadata or {}}
            raise unicode_error(fields, self.source, line) from None
        if metadata:
            self._metadata.append((self.digest.rows - 1, metadata))
        self._ids.append(doc_id)
        self._titles.append(title)
        self._texts.append(text)
        if len(self._ids) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._ids:
            return
        table = pa.table(
            {
                "doc_id": pa.array(self._ids, pa.string()),
                "title": pa.array(self._titles, pa.string()),
                "text": pa.array(self._texts, pa.string()),
            }
        )
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, table.schema, compression="zstd")
        self._writer.write_table(table)
        self._ids, self._titles, self._texts = [], [], []

    def close(self) -> CorpusSummary:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        self._flush()
        if self._writer is None:
            raise InputError("the corpus is empty; expected at least one document", path=self.source)
        self._writer.close()
        ids = pq.read_table(self.path, columns=["doc_id"]).column("doc_id")
        counts = pc.value_counts(ids)
        dupes = counts.filter(pc.greater(counts.field("counts"), 1))
        if len(dupes):
            shown = ", ".join(repr(v["values"].as_py()) for v in dupes[:5])
            raise InputError(f"duplicate document id {shown} ({len(dupes)} duplicated ids in all)", path=self.source)
        columns: list[str] = []
        if self._metadata:
            table = pd.read_parquet(self.path)
            meta = _metadata_frame(self._metadata, len(table), reserved=set(table.columns))
            columns = list(meta.columns)
            pd.concat([table, meta], axis=1).to_parquet(self.path, index=False, compression="zstd")
        return CorpusSummary(rows=self.digest.rows, digest=self.digest.hexdigest(), metadata_columns=columns)


MAX_METADATA_COLUMNS = 32


def id_error(kind: str, value: str, source: str, line: int | None) -> InputError:
    """An id that is empty or holds whitespace: run files (``qid Q0 docid rank score tag``) separate fields by
    whitespace, so every run over such an id would fail when written; refused at import instead."""
    return InputError(
        f"{kind} id {value!r} is empty or contains whitespace; expected an id without spaces, tabs or line breaks "
        "(run files separate their fields by whitespace)",
        path=source,
        line=line,
    )


def _metadata_frame(rows: list[tuple[int, dict[str, Any]]], n: int, reserved: set[str]) -> pd.DataFrame:
    """Metadata dicts (sparse, by row position) as columns; nested or mixed-type values as JSON text.

    When the dicts use more than ``MAX_METADATA_COLUMNS`` distinct keys (SciFact keys its query
    metadata by document id), they are kept whole as one JSON text column ``metadata``.
    """
    index = [i for i, _ in rows]
    keys = set().union(*(m.keys() for _, m in rows))
    if len(keys) > MAX_METADATA_COLUMNS:
        column: list[str | None] = [None] * n
        for i, m in rows:
            column[i] = metadata_json(m)
        return pd.DataFrame({"metadata": pd.array(column, dtype="str")})
    frame = pd.DataFrame.from_records([m for _, m in rows], index=index).reindex(range(n))
    frame.columns = [f"metadata.{c}" if c in reserved else str(c) for c in frame.columns]
    for col in frame.columns:
        values = frame[col].dropna()
        kinds = {type(v) for v in values}
        if not kinds <= {str} and not kinds <= {int, float} and not kinds <= {bool}:
            frame[col] = frame[col].map(
                lambda v: (
                    None if is_missing(v) else (v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str))
                )
            )
    return frame.reset_index(drop=True)


# ----------------------------------------------------------------------------- queries and qrels


def queries_frame(records: Sequence[QueryRecord], source: str) -> pd.DataFrame:
    """Queries ``(query_id, text, metadata, line)`` as a table; a duplicate id is an error naming both lines."""
    seen: dict[str, int] = {}
    for qid, text, meta, line in records:
        if qid in seen:
            raise InputError(f"duplicate query id {qid!r} (first seen on line {seen[qid]})", path=source, line=line)
        seen[qid] = line
        if qid.split() != [qid]:
            raise id_error("query", qid, source, line)
        try:
            (qid + text + (metadata_json(meta) if meta else "")).encode("utf-8")
        except UnicodeEncodeError:
            raise unicode_error({"_id": qid, "text": text, "metadata": meta or {}}, source, line) from None
    frame = pd.DataFrame(
        {
            "query_id": pd.array([r[0] for r in records], dtype="str"),
            "text": pd.array([r[1] for r in records], dtype="str"),
        }
    )
    if any(r[2] for r in records):
        meta = _metadata_frame(
            [(i, r[2]) for i, r in enumerate(records) if r[2]], len(records), reserved=set(frame.columns)
        )
        frame = pd.concat([frame, meta], axis=1)
    return frame


# ----------------------------------------------------------------------------- build


@dataclass
class CorpusSource:
    """The documents of a dataset as a reader yields them, and the file they come from (for messages)."""

    path: str
    records: Iterable[DocRecord]


@dataclass
class SplitSource:
    """One split ready to be checked: query records, raw qrels rows, and where they came from.

    ``candidates`` (zbench ``QueryDocuments``): the unjudged candidate lists; the split then needs
    no judgements. ``unjudged`` (a query set sampled from a log): every query is kept, judged or
    not, and the split may have no judgements at all (it awaits pooling or annotation).
    """

    split: str
    queries: Sequence[QueryRecord]
    qrels: Sequence[QrelRow]
    queries_source: str
    qrels_source: str
    candidates: pd.DataFrame | None = None
    unjudged: bool = False


def build_dataset(
    folder: Path,
    name: str,
    corpus: CorpusSource,
    splits: Iterable[SplitSource],
    source: dict[str, Any],
    *,
    ignore_identical_ids: bool = False,
) -> dict[str, Manifest]:
    """Check every record and write the whole dataset into ``folder``; returns the manifest of each split.

    ``splits`` may be a generator: each split is read, checked and written before the next one.
    Raises :class:`InputError` (naming the file and line) on the first bad record.
    """
    summary = write_corpus(folder, corpus, source)
    drop_missing_documents = bool(source.get("drop_missing_documents"))  # the import's choice, kept in provenance
    manifests = {}
    for split in splits:
        manifests[split.split] = write_split(
            folder, name, split, source, summary, ignore_identical_ids, drop_missing_documents
        )
    if not manifests:
        raise InputError("no split to store; expected at least one split with judgements", path=corpus.path)
    return manifests


def write_corpus(folder: Path, corpus: CorpusSource, source: dict[str, Any]) -> dict[str, Any]:
    """Stream the documents into ``folder/corpus.parquet`` and describe them in ``corpus.json``."""
    writer = CorpusWriter(folder / "corpus.parquet", source=corpus.path)
    for doc_id, title, text, metadata, line in corpus.records:
        writer.add(doc_id, title, text, metadata, line)
    summary = writer.close()
    info = {
        "documents": summary.rows,
        "digest": summary.digest,
        "metadata_columns": summary.metadata_columns,
        "source": source,
    }
    write_json(folder / "corpus.json", info)
    return info


def write_split(
    folder: Path,
    name: str,
    split: SplitSource,
    source: dict[str, Any],
    corpus_info: dict[str, Any],
    ignore_identical_ids: bool = False,
    drop_missing_documents: bool = False,
) -> Manifest:
    """Check one split against the corpus already in ``folder`` and write it; returns its manifest.

    The corpus is not loaded (only its id column is read), so a split of a large collection stays cheap.
    """
    check_split(split.split)
    queries = queries_frame(split.queries, split.queries_source)
    qrels, report = clean_qrels(
        split.qrels,
        queries["query_id"],
        folder / "corpus.parquet",
        split.qrels_source,
        drop_missing_documents=drop_missing_documents,
    )
    candidates = split.candidates
    if candidates is None and qrels.empty and not split.unjudged:
        raise InputError(
            f"no judged queries in split {split.split!r}: every judgement was dropped or the "
            "qrels are empty; expected at least one judgement of a known query and document",
            path=split.qrels_source,
        )
    if candidates is None and len(qrels) and report.missing.get("judgements") == len(qrels):
        raise InputError(
            f"none of the {report.missing['documents']:,} judged documents of split {split.split!r} is in the "
            f"corpus (e.g. {'; '.join(f'{q} -> {d}' for q, d in zip(qrels['query_id'][:3], qrels['doc_id'][:3]))}): "
            "are these judgements of another collection? "
            "Expected judgements of the corpus's document ids",
            path=split.qrels_source,
        )
    judged = set(qrels["query_id"])
    kept = set(queries["query_id"]) if split.unjudged else judged if candidates is None else set(candidates["query_id"])
    queries = queries[queries["query_id"].isin(kept)].dropna(axis=1, how="all").reset_index(drop=True)
    fp = fingerprint(corpus_info["digest"], corpus_info["documents"], queries, qrels)
    grades = {str(int(g)): int(n) for g, n in qrels["relevance"].value_counts().sort_index().items()}
    manifest: Manifest = {
        "name": name,
        "split": split.split,
        "source": source,
        "fingerprint": fp,
        "documents": corpus_info["documents"],
        "queries": int(len(queries)) if not split.unjudged else len(judged),
        "judgements": int(len(qrels)),
        "grades": grades,
        "ignore_identical_ids": ignore_identical_ids,
        "dropped_qrels": report.as_dict(),
        "missing_documents": report.missing,
        "store_format": STORE_FORMAT,
        "irflow_version": irflow_version(),
        "document_metadata": corpus_info["metadata_columns"],
        "query_metadata": [c for c in queries.columns if c not in _REQUIRED["queries"]],
    }
    if split.unjudged:
        manifest["unjudged_queries"] = int(len(queries)) - len(judged)
    out = folder / split.split
    out.mkdir()
    queries.to_parquet(out / "queries.parquet", index=False)
    qrels.to_parquet(out / "qrels.parquet", index=False)
    if candidates is not None:
        candidates.to_parquet(out / "candidates.parquet", index=False)
    write_json(out / "manifest.json", manifest)
    return manifest
