"""Dense search over the embedding cache: a dataset's corpus and query vectors under a ``DenseSpec``
(:mod:`irflow.tasks.embed`), searched through a FAISS index or, out of core, block by block
(:mod:`irflow.tasks.index`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import Dataset
from irflow.tasks.embed.vectors import api_spent, embed_corpus, embed_queries, model_for
from irflow.tasks.index.cache_blocks import streamed_corpus
from irflow.tasks.index.faiss_index import SearchIndex, build_index
from irflow.tasks.systems import DenseSpec


def dense_search(dataset: Dataset, spec: DenseSpec, depth: int) -> pd.DataFrame:
    """Top-``depth`` documents per query by cosine similarity: columns query_id, doc_id, score.

    ``df.attrs["dense"]`` carries what to track: model, identity, prompts, index parameters,
    build time and encode counts. Hits whose doc id equals the query id are dropped where the
    dataset asks for it (ArguAna, Quora).
    """
    model = model_for(spec)
    spent = api_spent(model)
    index: SearchIndex
    if spec.index == "blocks":  # out of core: streamed from the cache's Parquet parts (tasks.index.cache_blocks)
        docs, index = streamed_corpus(dataset, spec, model)
    else:
        docs = embed_corpus(dataset, spec, model=model)
        index = build_index(docs.vectors, spec.index, spec.index_params, cache_dir=docs.path)
    queries = embed_queries(dataset, spec, model=model)
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
        **spent(),
    }
    return run
