"""irflow index stage: the indexes a system searches, built once and cached.

Public API::

    from irflow.tasks.index import build_index, load_bm25

    index = build_index(vectors, "hnsw", {"M": 32}, cache_dir=path)   # FAISS (or Chroma, or blocks)
    scores, rows = index.search(query_vectors, 100)

Modules: ``faiss_index`` (exact inner product by default, HNSW, IVF, IVF-PQ; cached beside the
vectors), ``recall`` (recall@k of an approximate index against exact search), ``blocks`` (exact
top-k over vectors streamed in blocks, and IVF-PQ trained out of core), ``cache_blocks``
(``dense(index=blocks)``: the embedding cache's parts as blocks), ``chroma`` (a Chroma server as a
dense index), ``bm25`` (bm25s or rank-bm25 over a dataset, the tokenized corpus and index cached; the tokens in
``bm25_tokens``, the score matrix in ``bm25_scores``).
FAISS, bm25s and chromadb are imported only when an index is built or loaded.
"""

from __future__ import annotations

from irflow.tasks.index.bm25 import BM25Index
from irflow.tasks.index.bm25 import load_index as load_bm25
from irflow.tasks.index.faiss_index import SearchIndex, VectorIndex, build_index, resolve_params
from irflow.tasks.index.recall import exact_search, measure_recall, recall_against_exact

__all__ = [
    "BM25Index",
    "SearchIndex",
    "VectorIndex",
    "build_index",
    "exact_search",
    "load_bm25",
    "measure_recall",
    "recall_against_exact",
    "resolve_params",
]
