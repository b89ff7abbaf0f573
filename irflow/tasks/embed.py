"""Dense retrieval over the embedding cache: the text a document is embedded as, corpus and query
vectors of a dataset under a ``DenseSpec``, and dense search through a FAISS index.

Models live in ``tasks.models``; the resumable Parquet cache of vectors (and its keys) in
``tasks.embed_cache``. tasks.index (faiss) is imported inside ``dense_search``: importing this module is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from irflow.tasks.embed_cache import Embeddings, embed_texts, texts_key
from irflow.tasks.models import ResolvedModel, resolve_model
from irflow.tasks.schema import Dataset

if TYPE_CHECKING:
    from irflow.tasks.systems import DenseSpec


def document_texts(corpus: pd.DataFrame) -> list[str]:
    """The text a document is embedded as: ``(title + " " + text).strip()``."""
    title = corpus["title"].fillna("").astype(str)
    return (title + " " + corpus["text"].fillna("").astype(str)).str.strip().tolist()


def corpus_key(dataset: Dataset, spec: DenseSpec) -> str:
    """The cache key :func:`embed_corpus` uses for ``dataset`` under ``spec`` (for shard planners)."""
    model = resolve_model(spec.model)
    return texts_key(
        dataset.corpus["doc_id"].astype(str).tolist(),
        document_texts(dataset.corpus),
        model,
        role="document",
        prompt=model.prompt("document", spec.doc_prompt),
        max_seq_length=spec.max_seq_length,
    )[0]


def embed_corpus(dataset: Dataset, spec: DenseSpec, *, model: ResolvedModel | None = None, **kwargs: Any) -> Embeddings:
    """Document vectors of ``dataset`` under ``spec`` (model, doc prompt, max_seq_length, batch size)."""
    return embed_texts(
        dataset.corpus["doc_id"].astype(str).tolist(),
        document_texts(dataset.corpus),
        model or resolve_model(spec.model),
        role="document",
        prompt=spec.doc_prompt,
        max_seq_length=spec.max_seq_length,
        batch_size=spec.batch_size,
        **kwargs,
    )


def embed_queries(
    dataset: Dataset, spec: DenseSpec, *, model: ResolvedModel | None = None, **kwargs: Any
) -> Embeddings:
    """Query vectors of ``dataset`` under ``spec`` (model, query prompt, max_seq_length, batch size)."""
    return embed_texts(
        dataset.queries["query_id"].astype(str).tolist(),
        dataset.queries["text"].fillna("").astype(str).tolist(),
        model or resolve_model(spec.model),
        role="query",
        prompt=spec.query_prompt,
        max_seq_length=spec.max_seq_length,
        batch_size=spec.batch_size,
        **kwargs,
    )


def dense_search(dataset: Dataset, spec: DenseSpec, depth: int) -> pd.DataFrame:
    """Top-``depth`` documents per query by cosine similarity: columns query_id, doc_id, score.

    ``df.attrs["dense"]`` carries what to track: model, identity, prompts, index parameters,
    build time and encode counts. Hits whose doc id equals the query id are dropped where the
    dataset asks for it (ArguAna, Quora).
    """
    from irflow.tasks.index import build_index

    model = resolve_model(spec.model)
    docs = embed_corpus(dataset, spec, model=model)
    queries = embed_queries(dataset, spec, model=model)
    index = build_index(docs.vectors, spec.index, spec.index_params, cache_dir=docs.path)
    skip_self = dataset.ignore_identical_ids
    scores, rows = index.search(queries.vectors, depth + (1 if skip_self else 0))

    k = rows.shape[1]
    run = pd.DataFrame(
        {
            "query_id": np.repeat(np.asarray(queries.ids, dtype=object), k),
            "doc_id": np.asarray(docs.ids, dtype=object)[rows.ravel()],
            "score": scores.ravel().astype(np.float64),
        }
    )
    keep = rows.ravel() >= 0
    if skip_self:
        keep &= (run["query_id"] != run["doc_id"]).to_numpy()
    run = run[keep]
    run = run[run.groupby("query_id", sort=False).cumcount() < depth].reset_index(drop=True)
    run.attrs["dense"] = {
        "model": model.name,
        "model_identity": model.identity,
        "query_prompt": queries.info["prompt"],
        "doc_prompt": docs.info["prompt"],
        "max_seq_length": spec.max_seq_length,
        "dim": docs.info["dim"],
        "docs_encoded": docs.encoded,
        "queries_encoded": queries.encoded,
        "embedding_key": docs.key,
        **index.tracking(),
    }
    return run
