"""A dataset's vectors under a ``DenseSpec``: the text a document is embedded as, the corpus and query
vectors (read from the embedding cache, or encoded into it), and what an API model spent or would spend.

Models live in ``embed.models`` (local) and ``embed.api`` (behind an API); the resumable Parquet cache
of vectors (and its keys) in ``embed.cache``; dense search over these vectors in ``retrieve.dense``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from irflow.tasks.core.schema import Dataset
from irflow.tasks.embed.api import ApiModel
from irflow.tasks.embed.cache import Embeddings, embed_texts, part_path, plan_chunks, read_part, texts_key
from irflow.tasks.embed.models import resolve_model, with_encoder
from irflow.tasks.systems.api_options import is_api_model

if TYPE_CHECKING:
    from irflow.tasks.embed.models import Encoder
    from irflow.tasks.systems.specs import DenseSpec


def model_for(spec: DenseSpec) -> Encoder:
    """The model of a dense spec: a local one (``resolve_model``) or an API model, one object per spec
    and endpoint in a process, so its usage (calls, tokens) adds up across the stages."""
    if is_api_model(spec.model):
        return _api_model(spec.model, spec.api, spec.batch_size, os.environ.get("OPENAI_BASE_URL"))
    return with_encoder(resolve_model(spec.model), spec)  # backend, quantize, precision, device


@functools.lru_cache(maxsize=64)
def _api_model(model: str, options: tuple[tuple[str, str], ...], batch_size: int, _env_url: str | None) -> ApiModel:
    return ApiModel.from_spec(model, options, batch_size)


def document_texts(corpus: pd.DataFrame) -> list[str]:
    """The text a document is embedded as: ``(title + " " + text).strip()``."""
    title = corpus["title"].fillna("").astype(str)
    return (title + " " + corpus["text"].fillna("").astype(str)).str.strip().tolist()


def role_texts(dataset: Dataset, role: str) -> tuple[list[str], list[str]]:
    """Ids and the texts embedded for ``role``: the corpus (``document``) or the queries (``query``)."""
    if role == "document":
        return dataset.corpus["doc_id"].astype(str).tolist(), document_texts(dataset.corpus)
    queries = dataset.queries
    return queries["query_id"].astype(str).tolist(), queries["text"].fillna("").astype(str).tolist()


def corpus_key(dataset: Dataset, spec: DenseSpec) -> str:
    """The cache key :func:`embed_corpus` uses for ``dataset`` under ``spec`` (for shard planners)."""
    model = model_for(spec)
    return texts_key(
        *role_texts(dataset, "document"),
        model,
        role="document",
        prompt=model.prompt("document", spec.doc_prompt),
        max_seq_length=spec.max_seq_length,
    )[0]


def embed_corpus(dataset: Dataset, spec: DenseSpec, *, model: Encoder | None = None, **kwargs: Any) -> Embeddings:
    """Document vectors of ``dataset`` under ``spec`` (model, doc prompt, max_seq_length, batch size)."""
    return embed_texts(
        *role_texts(dataset, "document"),
        model or model_for(spec),
        role="document",
        prompt=spec.doc_prompt,
        max_seq_length=spec.max_seq_length,
        batch_size=spec.batch_size,
        **kwargs,
    )


def embed_queries(dataset: Dataset, spec: DenseSpec, *, model: Encoder | None = None, **kwargs: Any) -> Embeddings:
    """Query vectors of ``dataset`` under ``spec`` (model, query prompt, max_seq_length, batch size)."""
    return embed_texts(
        *role_texts(dataset, "query"),
        model or model_for(spec),
        role="query",
        prompt=spec.query_prompt,
        max_seq_length=spec.max_seq_length,
        batch_size=spec.batch_size,
        **kwargs,
    )


def api_spent(model: Encoder) -> Any:
    """A function giving what an API model spent since this call: ``api_calls``, ``api_tokens``,
    ``api_price_per_1m`` and ``api_tokens_reported`` (whether the API reported them or they were
    estimated); ``{}`` for a local model."""
    if not isinstance(model, ApiModel):
        return dict
    calls0, _, tokens0 = model.usage.snapshot()

    def spent() -> dict[str, Any]:
        calls, _, tokens = model.usage.snapshot()
        return {
            "api_calls": calls - calls0,
            "api_tokens": tokens - tokens0,
            "api_price_per_1m": model.price_per_1m,
            "api_tokens_reported": model.usage.tokens_reported,
        }

    return spent


def api_estimate(dataset: Dataset, spec: DenseSpec) -> dict[str, Any]:
    """What embedding the dataset (corpus and queries) with an API model would cost now: calls, tokens
    and USD for the texts whose vectors are not cached yet (nothing is sent)."""
    from irflow.tasks.core.config import cache_dir

    model = model_for(spec)
    if not isinstance(model, ApiModel):
        raise ValueError(f"{spec} does not embed through an API")
    todo: list[str] = []
    cached = 0
    for role, prompt in (("document", spec.doc_prompt), ("query", spec.query_prompt)):
        ids, texts = role_texts(dataset, role)
        prompt = model.prompt(role, prompt)
        key, _ = texts_key(ids, texts, model, role=role, prompt=prompt, max_seq_length=None)
        key_dir = Path(cache_dir()) / "embeddings" / key
        for chunk, rows in enumerate(plan_chunks(texts)):
            if read_part(part_path(key_dir, chunk), [ids[i] for i in rows]) is not None:
                cached += len(rows)
            else:
                todo += [prompt + texts[i] for i in rows]
    return {**model.estimate(todo), "cached_texts": cached}


def api_plan(dataset: Dataset, systems: Sequence[str], *, latency_queries: int = 0) -> list[dict[str, Any]]:
    """The API calls an evaluation of ``systems`` would make, per API embedding model inside them:
    :func:`api_estimate` for the evaluation, plus ``latency_queries`` single-query calls (the latency
    stage encodes each timed query on its own). A model that several systems share is listed once, under
    the first (its vectors are encoded once). Nothing is sent."""
    from irflow.tasks.systems.specs import DenseSpec, as_spec, walk

    plan: list[dict[str, Any]] = []
    seen: set[str] = set()
    for system in systems:
        for node in walk(as_spec(system)):
            if isinstance(node, DenseSpec) and is_api_model(node.model) and str(node) not in seen:
                seen.add(str(node))
                model = model_for(node)
                assert isinstance(model, ApiModel)
                evaluation = api_estimate(dataset, node)
                texts = role_texts(dataset, "query")[1][:latency_queries] or [""]
                per_query = model.estimate(texts)["tokens"] / len(texts)
                latency_tokens = round(per_query * latency_queries)
                price = model.price_per_1m
                plan.append(
                    {
                        "system": str(system),
                        "model": model.identity,
                        **evaluation,
                        "latency_calls": latency_queries,
                        "latency_tokens": latency_tokens,
                        "latency_usd": None if price is None else latency_tokens * price / 1e6,
                    }
                )
    return plan
