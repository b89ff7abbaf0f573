"""Human relevance judgements given as a file rather than a stored dataset (``--human FILE``): a qrels file
(TREC ``qid iter docid grade`` or BEIR ``query-id<TAB>corpus-id<TAB>score``) or a filled judging sheet
(``irflow pool``'s ``sheet.tsv``, a header with ``query_id``, ``doc_id`` and ``grade``), read as a
:class:`~irflow.tasks.core.schema.Dataset` that holds only its judgements."""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd

from irflow.tasks.core.paths import regular_file
from irflow.tasks.core.schema import Dataset, InputError, Manifest
from irflow.tasks.ingest.readers import read_qrels
from irflow.tasks.ingest.sheet import read_sheet

JUDGEMENTS_FILE = "a qrels file (TREC or BEIR) or a filled sheet (query_id, doc_id, grade)"


def _is_sheet(path: Path) -> bool:
    """A CSV/TSV whose first line names ``query_id``, ``doc_id`` and ``grade`` columns."""
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            first = fh.readline(65536)
    except (OSError, UnicodeDecodeError):
        return False
    delimiter = "," if path.suffix.lower() == ".csv" else "\t"
    header = {c.strip() for c in next(csv.reader([first], delimiter=delimiter), [])}
    return {"query_id", "doc_id", "grade"} <= header


def read_judgements(path: str | Path, option: str = "--human") -> pd.DataFrame:
    """``query_id, doc_id, relevance`` of a qrels file or a filled sheet; errors name ``option``, the file and
    the line. A pair judged twice keeps its last grade (as a qrels import does)."""
    path = regular_file(path, f"{option}: {JUDGEMENTS_FILE}")
    rows = read_sheet(path) if _is_sheet(path) else read_qrels(path)
    if not rows:
        raise InputError(f"{option}: no judgements in the file; expected {JUDGEMENTS_FILE}", path=str(path))
    table = pd.DataFrame([r[:3] for r in rows], columns=["query_id", "doc_id", "relevance"])
    table = table.drop_duplicates(["query_id", "doc_id"], keep="last").reset_index(drop=True)
    return table.astype({"query_id": str, "doc_id": str, "relevance": "int64"})


def judgements_dataset(path: str | Path, split: str = "test", option: str = "--human") -> Dataset:
    """The judgements of ``path`` as a dataset named by the path: no corpus or queries of its own (they are
    the evaluated dataset's), only ``qrels``."""
    qrels = read_judgements(path, option)
    corpus = pd.DataFrame({"doc_id": pd.Series(dtype=str), "title": pd.Series(dtype=str), "text": pd.Series(dtype=str)})
    queries = pd.DataFrame({"query_id": pd.Series(dtype=str), "text": pd.Series(dtype=str)})
    manifest = Manifest(source={"format": "judgements", "path": str(path)})
    return Dataset(str(path), split, corpus, queries, qrels, manifest)


__all__ = ["JUDGEMENTS_FILE", "judgements_dataset", "read_judgements"]
