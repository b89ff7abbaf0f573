"""Annotation outputs that feed the rest of irflow: zbench ``AnnotatedQueryDocuments`` JSONL and graded qrels.

Grades follow the zbench import's stated mapping (``tasks.ingest.custom``): per query,
``p = exp(score − best score)`` — the Bradley–Terry strength relative to the query's best
document — gives grade 3 if p ≥ 0.5, 2 if p ≥ 0.25, 1 if p ≥ 0.1, else 0. The qrels are
produced by reading the written file back through that importer, so
``irflow datasets import annotated.jsonl --format zbench`` yields exactly the same judgements.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.annotate.candidates import Texts
from irflow.tasks.core.atomic import atomic_open
from irflow.tasks.core.schema import Dataset


def annotated_lines(scores: pd.DataFrame, texts: Texts, dataset: Dataset | None = None) -> list[dict[str, Any]]:
    """One ``AnnotatedQueryDocuments`` object per query: documents in first-stage order, each with its zELO ``score``
    (and the corpus's metadata columns, when ``dataset`` is given)."""
    metadata: dict[str, dict[str, Any]] = {}
    if dataset is not None:
        columns = [c for c in dataset.corpus.columns if c not in ("doc_id", "title", "text")]
        if columns:
            for rec in dataset.corpus[["doc_id", *columns]].to_dict("records"):
                meta = {c: _plain(rec[c]) for c in columns if not _missing(rec[c])}
                if meta:
                    metadata[str(rec["doc_id"])] = meta
    lines = []
    for qid, group in scores.sort_values(["query_id", "rank"], kind="stable").groupby("query_id", sort=True):
        documents = []
        for doc_id, score in zip(group["doc_id"].astype(str), group["score"]):
            doc: dict[str, Any] = {"id": doc_id, "content": texts.documents[doc_id]}
            if doc_id in metadata:
                doc["metadata"] = metadata[doc_id]
            doc["score"] = float(score)
            documents.append(doc)
        lines.append({"query": {"id": str(qid), "query": texts.queries[str(qid)]}, "documents": documents})
    return lines


def write_annotated(path: str | Path, scores: pd.DataFrame, texts: Texts, dataset: Dataset | None = None) -> Path:
    """Write the zbench-compatible annotated JSONL atomically; returns its path."""
    path = Path(path)
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for line in annotated_lines(scores, texts, dataset):
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def graded_qrels(annotated: str | Path, grade_thresholds: tuple[float, ...] | None = None) -> pd.DataFrame:
    """Qrels (query_id, doc_id, relevance) of an annotated JSONL, graded exactly as the zbench import grades it."""
    from irflow.tasks.ingest.custom import read_zbench

    parsed = read_zbench(Path(annotated), grade_thresholds=grade_thresholds)
    return pd.DataFrame([(q, d, g) for q, d, g, _ in parsed.qrels], columns=["query_id", "doc_id", "relevance"]).astype(
        {"query_id": "str", "doc_id": "str", "relevance": "int64"}
    )


def write_trec_qrels(path: str | Path, qrels: pd.DataFrame) -> Path:
    """TREC qrels (``qid 0 docid grade``), atomically: ``irflow datasets import --format trec-qrels --base NAME``."""
    path = Path(path)
    with atomic_open(path, "w", encoding="utf-8") as fh:
        for q, d, g in qrels.sort_values(["query_id", "doc_id"]).itertuples(index=False):
            fh.write(f"{q} 0 {d} {int(g)}\n")
    return path


def _missing(value: Any) -> bool:
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


ANCHOR_THRESHOLD = 0.75  # P(beats the query's anchors) a document needs to keep a grade above 0


def calibrate(
    qrels: pd.DataFrame, scores: pd.DataFrame, anchors: pd.DataFrame, threshold: float = ANCHOR_THRESHOLD
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Cross-query calibration of per-query grades with anchors (documents of other queries, see
    ``candidates.draw_anchors``): a document's chance to beat its query's anchors under the Bradley–Terry
    model, ``q = mean over anchors of σ(s_doc − s_anchor)``, must reach ``threshold`` for it to keep its
    grade; below, it is graded 0 — no more relevant than a random document. So a query where nothing is
    relevant no longer gives its best candidate grade 3. Returns the qrels and what changed."""
    import numpy as np

    if not 0.5 <= threshold < 1:
        raise ValueError(f"anchor threshold must be in [0.5, 1), got {threshold}")
    by_query = {str(q): g["score"].to_numpy(np.float64) for q, g in anchors.groupby("query_id")}
    q = np.array(
        [
            float(np.mean(1.0 / (1.0 + np.exp(by_query[str(qid)] - s)))) if str(qid) in by_query else np.nan
            for qid, s in zip(scores["query_id"], scores["score"])
        ]
    )
    beats = pd.DataFrame({"query_id": scores["query_id"].astype(str), "doc_id": scores["doc_id"].astype(str), "q": q})
    merged = qrels.astype({"query_id": "str", "doc_id": "str"}).merge(beats, on=["query_id", "doc_id"], how="left")
    demote = (merged["relevance"] > 0) & (merged["q"] < threshold)
    merged.loc[demote, "relevance"] = 0
    relevant = merged[merged["relevance"] > 0]["query_id"].nunique()
    summary = {
        "anchors_per_query": int(anchors.groupby("query_id").size().max()) if len(anchors) else 0,
        "threshold": threshold,
        "demoted": int(demote.sum()),
        "queries": int(merged["query_id"].nunique()),
        "queries_without_relevant": int(merged["query_id"].nunique() - relevant),
    }
    return merged[["query_id", "doc_id", "relevance"]].astype({"relevance": "int64"}), summary
