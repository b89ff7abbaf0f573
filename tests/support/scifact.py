"""Private test helper: SciFact (test split) as a tasks.core.schema.Dataset, read straight from the
shared BEIR zip with zipfile/json/csv, whole or as a small subset that still has answers.

Kept independent of tasks.ingest so the dense tests exercise embed/index only.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from irflow.tasks.core.schema import Dataset

SHARED_DIR = Path(os.environ.get("IRFLOW_SHARED_DIR") or Path(__file__).resolve().parents[3] / "shared")
SCIFACT_ZIP = SHARED_DIR / "datasets" / "beir" / "scifact.zip"
MISSING = f"SciFact not found at {SCIFACT_ZIP} (set IRFLOW_SHARED_DIR to the shared folder)"


def require_scifact() -> None:
    """Skip when the shared zip is absent (fail instead under IRFLOW_REQUIRE_SHARED=1, as in CI)."""
    if not SCIFACT_ZIP.is_file():
        if os.environ.get("IRFLOW_REQUIRE_SHARED") == "1":
            pytest.fail(MISSING)
        pytest.skip(MISSING)


@functools.lru_cache(maxsize=1)
def _read() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    with zipfile.ZipFile(SCIFACT_ZIP) as zf:
        corpus = [json.loads(line) for line in zf.read("scifact/corpus.jsonl").decode("utf-8").split("\n") if line]
        queries = [json.loads(line) for line in zf.read("scifact/queries.jsonl").decode("utf-8").split("\n") if line]
        rows = list(csv.reader(io.StringIO(zf.read("scifact/qrels/test.tsv").decode("utf-8")), delimiter="\t"))
    qrels = pd.DataFrame(rows[1:], columns=["query_id", "doc_id", "relevance"]).astype({"relevance": "int64"})
    corpus_df = pd.DataFrame(
        {
            "doc_id": [str(d["_id"]) for d in corpus],
            "title": [d["title"] for d in corpus],
            "text": [d["text"] for d in corpus],
        }
    )
    judged = set(qrels["query_id"])
    queries_df = pd.DataFrame(
        {
            "query_id": [str(q["_id"]) for q in queries if str(q["_id"]) in judged],
            "text": [q["text"] for q in queries if str(q["_id"]) in judged],
        }
    )
    return corpus_df, queries_df, qrels


def scifact(n_docs: int | None = None) -> Dataset:
    """SciFact test split; with ``n_docs``, a subset: the judged documents of the first test
    queries (up to half of ``n_docs``) topped up with other documents in file order."""
    require_scifact()
    corpus, queries, qrels = _read()
    if n_docs is not None:
        keep: dict[str, None] = {}
        chosen = []
        for qid, group in qrels.groupby("query_id", sort=False):
            if len(keep) + len(group) > n_docs // 2:
                break
            chosen.append(qid)
            keep.update(dict.fromkeys(group["doc_id"]))
        for doc_id in corpus["doc_id"]:
            if len(keep) >= n_docs:
                break
            keep.setdefault(doc_id)
        corpus = corpus.set_index("doc_id").loc[list(keep)].reset_index()
        queries = queries[queries["query_id"].isin(chosen)].reset_index(drop=True)
        qrels = qrels[qrels["query_id"].isin(chosen)].reset_index(drop=True)
    digest = hashlib.sha256()
    for table in (corpus, queries, qrels):
        digest.update(table.to_json(orient="split").encode())
    name = "beir/scifact" if n_docs is None else f"beir/scifact[:{n_docs}]"
    return Dataset(name, "test", corpus, queries, qrels, {"fingerprint": digest.hexdigest()})
