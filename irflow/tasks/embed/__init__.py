"""irflow embed stage: texts to vectors with a local or API model, cached as Parquet under content keys.

Public API::

    from irflow.tasks.embed import embed_corpus, embed_queries, resolve_model

    vectors = embed_corpus(dataset, parse_system("dense:minilm"))   # Embeddings: ids, vectors, key, path
    vectors.encoded      # 0 when every part came from the cache

Modules: ``models`` (resolve a name or directory to a model and its identity, load it once),
``inference`` (encode texts, score pairs: torch, or an exported graph), ``backends`` and ``exports``
(ONNX Runtime / OpenVINO graphs, built once per weights and recipe), ``api`` (OpenAI-compatible
embedding endpoints through the HTTP client layer), ``cache`` (the resumable Parquet cache: keys,
parts, ``_COMPLETE``, locks), ``vectors`` (a dataset's corpus and query vectors under a spec),
``sharding`` (the embed stage's plan: which encodings a run needs, in how many chunks).
Heavy libraries (sentence-transformers, torch, ONNX Runtime) are imported only when a model runs.
"""

from __future__ import annotations

from irflow.tasks.embed.cache import Embeddings, embed_texts, texts_key
from irflow.tasks.embed.inference import score_pairs, score_pairs_many
from irflow.tasks.embed.models import ResolvedModel, model_identity, resolve_model, with_encoder
from irflow.tasks.embed.vectors import api_plan, document_texts, embed_corpus, embed_queries, model_for

__all__ = [
    "Embeddings",
    "ResolvedModel",
    "api_plan",
    "document_texts",
    "embed_corpus",
    "embed_queries",
    "embed_texts",
    "model_for",
    "model_identity",
    "resolve_model",
    "score_pairs",
    "score_pairs_many",
    "texts_key",
    "with_encoder",
]
