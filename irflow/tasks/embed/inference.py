"""Inference with a local or API model: encode texts, score (query, document) pairs.

Above :mod:`~irflow.tasks.embed.models` (which resolves and loads a model) and
:mod:`~irflow.tasks.embed.backends` (which runs an exported graph): a torch model runs through
sentence-transformers, any other backend through its exported graph, an API model through its endpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.tasks.core.stop import check_stop
from irflow.tasks.embed.backends import encode_exported, load_exported, score_exported
from irflow.tasks.embed.models import (
    MODEL_MAX_SEQ_LENGTH,
    ResolvedModel,
    is_cross_encoder,
    load_cross_encoder,
    load_sentence_transformer,
    require_backend,
    resolve_model,
    with_encoder,
)

if TYPE_CHECKING:
    from irflow.tasks.embed.models import Encoder


def encode(
    model: Encoder, texts: Sequence[str], *, prompt: str, max_seq_length: int | None, batch_size: int = 32
) -> np.ndarray:
    """Encode ``texts`` straight through ``SentenceTransformer.encode`` (normalised float32); an API
    model (``tasks.embed.api``) sends them to its endpoint."""
    if not isinstance(model, ResolvedModel):
        return model.encode(texts, prompt=prompt)
    if model.backend != "torch":
        require_backend(model.backend, model.quantize)
        return encode_exported(model, texts, prompt=prompt, max_seq_length=max_seq_length, batch_size=batch_size)
    st = load_sentence_transformer(model.path, model.precision, model.device)
    st.max_seq_length = max_seq_length or MODEL_MAX_SEQ_LENGTH[model.path]
    # SIGTERM ends an encode in a worker thread within a layer (the handler runs in the main thread only;
    # without this the process would live until the whole corpus is encoded): every module checks first
    hooks = [module.register_forward_pre_hook(_check_stop) for module in st.modules()]
    try:
        vectors = st.encode(
            list(texts),
            prompt=prompt,
            batch_size=batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
    finally:
        for hook in hooks:
            hook.remove()
    return np.asarray(vectors, dtype=np.float32)


def _check_stop(module: Any, args: Any) -> None:
    """A forward pre-hook: raise ``Terminated`` once SIGTERM arrived (``tasks.core.stop``)."""
    check_stop()


def load_encoder(model: Encoder) -> None:
    """Load a local model (torch, or its exported graph) as :func:`encode` would, so that the first encoded
    batch is timed without the import, the weights' loading or the graph's compilation; an API model has
    nothing to load."""
    if not isinstance(model, ResolvedModel):
        return
    if model.backend != "torch":
        require_backend(model.backend, model.quantize)
        load_exported(model)
    else:
        load_sentence_transformer(model.path, model.precision, model.device)


def score_pairs(model: str, query: str, documents: Sequence[str], *, batch_size: int = 32) -> list[float]:
    """Relevance of each document to ``query``: a cross-encoder's score when ``model`` is one,
    else the bi-encoder cosine similarity (query and document prompts applied)."""
    return score_pairs_many(model, [(query, documents)], batch_size=batch_size)[0]


def score_pairs_many(
    model: str, items: Sequence[tuple[str, Sequence[str]]], *, batch_size: int = 32, encoder: Any = None
) -> list[list[float]]:
    """``score_pairs`` for many queries at once: one model call over every pair (fast reranking).
    ``encoder``: a spec whose backend/quantize/precision/device options the model runs with."""
    resolved = resolve_model(model) if encoder is None else with_encoder(resolve_model(model), encoder)
    sizes = [len(docs) for _, docs in items]
    if is_cross_encoder(resolved):
        pairs = [(query, doc) for query, docs in items for doc in docs]
        if resolved.backend != "torch":
            require_backend(resolved.backend, resolved.quantize)
            flat = score_exported(resolved, pairs, batch_size=batch_size)
        else:
            cross_encoder = load_cross_encoder(resolved.path, resolved.precision, resolved.device)
            flat = np.asarray(
                cross_encoder.predict(pairs, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True),
                dtype=np.float64,
            )
    else:
        queries = list(dict.fromkeys(query for query, _ in items))
        docs = list(dict.fromkeys(doc for _, ds in items for doc in ds))
        qv = encode(resolved, queries, prompt=resolved.query_prompt, max_seq_length=None, batch_size=batch_size)
        dv = encode(resolved, docs, prompt=resolved.doc_prompt, max_seq_length=None, batch_size=batch_size)
        q_row = {q: i for i, q in enumerate(queries)}
        d_row = {d: i for i, d in enumerate(docs)}
        flat = (
            np.concatenate(
                [
                    (dv[[d_row[d] for d in ds]] @ qv[q_row[q]]).astype(np.float64) if ds else np.zeros(0)
                    for q, ds in items
                ]
            )
            if items
            else np.zeros(0)
        )
    bounds = np.cumsum([0, *sizes])
    return [flat[bounds[i] : bounds[i + 1]].tolist() for i in range(len(items))]
