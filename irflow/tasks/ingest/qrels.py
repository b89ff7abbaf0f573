"""Judgements: grades checked, duplicates dropped, judgements of unknown queries dropped and of
documents absent from the corpus kept (trec_eval and BEIR semantics) -- each counted and reported.

A judgement of a document that is not in the corpus counts as relevant and no system can retrieve
it, so its query cannot score full marks; trec_eval and BEIR keep such judgements and the query in
the mean, and so does irflow. The manifest's ``missing_documents`` block says how many there are and
which queries they cap; ``drop_missing_documents`` (an import option) drops them instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest.records import MAX_GRADE, MIN_GRADE, QrelRow, unicode_error

log = logging.getLogger(__name__)


@dataclass
class QrelsReport:
    """What the judgements refer to that the queries or the corpus lack, and what was dropped (never silently).

    Judgements of documents absent from the corpus are *kept* by default (``missing_doc``), as trec_eval
    and BEIR keep them: the document counts as relevant, no system can retrieve it, and its query stays
    in the mean. ``unknown_doc`` counts such judgements only when the import was asked to drop them.
    """

    unknown_query: int = 0
    unknown_doc: int = 0
    duplicate: int = 0
    missing_doc: int = 0
    examples: list[str] = field(default_factory=list)
    missing: dict[str, Any] = field(default_factory=dict)

    @property
    def dropped(self) -> int:
        return self.unknown_query + self.unknown_doc + self.duplicate

    def as_dict(self) -> dict[str, Any]:
        return {
            "unknown_query": self.unknown_query,
            "unknown_doc": self.unknown_doc,
            "duplicate": self.duplicate,
            "examples": self.examples,
        }


def missing_documents_summary(qrels: pd.DataFrame, missing: np.ndarray) -> dict[str, Any]:
    """The manifest's ``missing_documents`` block: judgements (rows of ``qrels`` flagged in ``missing``)
    of documents that are not in the corpus, how many are relevant, and which queries they cap."""
    rows = qrels[missing]
    relevant = rows[rows["relevance"] > 0]
    all_relevant = qrels[qrels["relevance"] > 0]
    capped = sorted(set(relevant["query_id"]))
    unreachable = sorted(set(capped) - set(all_relevant[~missing[all_relevant.index]]["query_id"]))
    return {
        "judgements": int(len(rows)),
        "documents": int(rows["doc_id"].nunique()),
        "relevant_judgements": int(len(relevant)),
        "queries": len(capped),
        "queries_without_retrievable_relevant": len(unreachable),
        "examples": [f"{q} -> {d}" for q, d in zip(relevant["query_id"][:5], relevant["doc_id"][:5])],
    }


def check_grade(grade: Any, path: str, line: int | None) -> int:
    """``grade`` as an int if it is an integer from MIN_GRADE to MAX_GRADE (not a bool); else InputError."""
    if isinstance(grade, bool) or not isinstance(grade, int):
        raise InputError(
            f"relevance grade {grade!r} is not an integer; expected an integer from {MIN_GRADE} to {MAX_GRADE}",
            path=path,
            line=line,
        )
    if not MIN_GRADE <= grade <= MAX_GRADE:
        shown = str(grade) if abs(grade) < 10**18 else f"{str(grade)[:12]}... ({len(str(abs(grade)))} digits)"
        hint = " (trec_eval reads negative grades as not relevant: use 0)" if grade < 0 else ""
        raise InputError(
            f"relevance grade {shown} is out of range; expected an integer from {MIN_GRADE} "
            f"(judged not relevant) to {MAX_GRADE}{hint}",
            path=path,
            line=line,
        )
    return grade


def clean_qrels(
    rows: Sequence[QrelRow],
    query_ids: pd.Series,
    corpus_path: Path,
    source: str,
    *,
    drop_missing_documents: bool = False,
) -> tuple[pd.DataFrame, QrelsReport]:
    """Validate judgements against the queries and the corpus.

    Every grade must pass :func:`check_grade`. Exact duplicate lines are dropped and counted; the
    same pair with two different grades is an error naming both lines; judgements of unknown
    queries are counted, reported and dropped (such a query cannot be run). Judgements of documents
    absent from the corpus are kept and reported (trec_eval and BEIR semantics), or dropped and
    counted with ``drop_missing_documents``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    report = QrelsReport()
    first: dict[tuple[str, str], tuple[int, int]] = {}
    kept: list[tuple[str, str, int]] = []
    for qid, did, grade, line in rows:
        check_grade(grade, source, line)
        try:
            (qid + did).encode("utf-8")
        except UnicodeEncodeError:
            raise unicode_error({"query_id": qid, "doc_id": did}, source, line) from None
        prev = first.get((qid, did))
        if prev is not None:
            if prev[0] != grade:
                raise InputError(
                    f"query {qid!r} and document {did!r} judged twice with different grades "
                    f"({prev[0]} on line {prev[1]}, {grade} here)",
                    path=source,
                    line=line,
                )
            report.duplicate += 1
            continue
        first[(qid, did)] = (grade, line)
        kept.append((qid, did, grade))
    frame = pd.DataFrame(kept, columns=["query_id", "doc_id", "relevance"]).astype(
        {"query_id": "str", "doc_id": "str", "relevance": "int64"}
    )
    known_query = frame["query_id"].isin(set(query_ids))
    doc_ids = pq.read_table(corpus_path, columns=["doc_id"]).column("doc_id")
    known_doc = pc.is_in(
        pa.array(frame["doc_id"].to_numpy(dtype=object), pa.string()), value_set=doc_ids.combine_chunks()
    ).to_numpy(zero_copy_only=False)
    report.unknown_query = int((~known_query).sum())
    missing = (known_query & ~known_doc).to_numpy()
    if drop_missing_documents:
        report.unknown_doc = int(missing.sum())
        keep = (known_query & known_doc).to_numpy()
    else:
        report.missing_doc = int(missing.sum())
        keep = known_query.to_numpy()
    bad = frame[~keep]
    for qid, did in zip(bad["query_id"][:5], bad["doc_id"][:5]):
        report.examples.append(f"{qid} -> {did}")
    if report.dropped:
        log.warning(
            "%s: dropped %d judgements (%d unknown query ids, %d unknown document ids, %d duplicate lines), e.g. %s",
            source,
            report.dropped,
            report.unknown_query,
            report.unknown_doc,
            report.duplicate,
            "; ".join(report.examples) or "-",
        )
    kept = frame[keep].reset_index(drop=True)
    report.missing = missing_documents_summary(kept, missing[keep])
    if report.missing_doc:
        log.warning("%s: %s", source, describe_missing_documents(report.missing))
    return kept, report


def describe_missing_documents(missing: dict[str, Any]) -> str:
    """One sentence for logs, ``datasets info`` and reports about judged documents absent from the corpus."""
    text = (
        f"{missing['documents']:,} judged documents are not in the corpus ({missing['judgements']:,} judgements, "
        f"{missing['relevant_judgements']:,} relevant): they count as relevant and no system can retrieve them, so "
        f"{missing['queries']:,} queries cannot score full marks"
    )
    if missing.get("queries_without_retrievable_relevant"):
        text += f" ({missing['queries_without_retrievable_relevant']:,} can score nothing)"
    return text + (f"; e.g. {'; '.join(missing['examples'])}" if missing.get("examples") else "")
