"""Private test helpers: a toy BEIR dataset, store snapshots, and a worker for the concurrency test."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.core.schema import Dataset

DOCS = [
    {"_id": "d1", "title": "Alpha", "text": "first doc"},
    {"_id": "d2", "title": "", "text": "second doc"},
    {"_id": "3", "title": "Gamma", "text": "third", "metadata": {"doc_type": "code"}},
]
QUERIES = [{"_id": "q1", "text": "alpha?"}, {"_id": "q2", "text": "second?"}, {"_id": "q3", "text": "unjudged"}]
QRELS = "query-id\tcorpus-id\tscore\r\nq1\td1\t2\r\nq1\t3\t0\r\nq2\td2\t1\r\n"


def write_beir(
    folder: Path,
    corpus: list[dict[str, Any]] | str,
    queries: list[dict[str, Any]] | str,
    qrels: str,
    split: str = "test",
) -> Path:
    """A small BEIR-layout folder; lists are written as JSONL, strings verbatim."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    for name, rows in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
        text = rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows)
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "qrels" / f"{split}.tsv").write_text(qrels, encoding="utf-8")
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` by relative path: equal snapshots mean byte-for-byte equal trees."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def ingest_rounds(cache_dirs: list[str], barrier: Any, results: Any) -> None:
    """Concurrency worker (run in a spawned process): per round, wait for the others, then ingest techdocs."""
    from irflow.tasks.ingest import dataset_info

    for cache in cache_dirs:
        os.environ["IRFLOW_CACHE_DIR"] = cache
        barrier.wait(timeout=300)
        try:
            results.put(("ok", dataset_info("techdocs")["fingerprint"]))
        except BaseException as err:  # report every failure, whatever it is
            results.put(("error", f"{type(err).__name__}: {err}"))


def tiny_dataset(ignore_identical_ids: bool = False) -> Dataset:
    corpus = pd.DataFrame(
        {
            "doc_id": ["d1", "d2", "d3", "q1", "d5"],
            "title": ["Cats", "Dogs", "", "Cats and dogs", None],
            "text": ["cats purr and sleep", "dogs bark loudly", "birds sing songs", "cats chase dogs", "fish swim"],
        }
    )
    queries = pd.DataFrame({"query_id": ["q1", "q2", "q3"], "text": ["cats dogs", "the and of", "zebras"]})
    qrels = pd.DataFrame({"query_id": ["q1"], "doc_id": ["d1"], "relevance": [1]})
    return Dataset(
        "tiny",
        "test",
        corpus,
        queries,
        qrels,
        {"fingerprint": f"tiny-{ignore_identical_ids}", "ignore_identical_ids": ignore_identical_ids},
    )
