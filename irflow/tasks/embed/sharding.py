"""Plan the embed stage: which corpus encodings an evaluation needs, where they are cached, in how many chunks.

An :class:`EmbedJob` is one corpus encoding (a dense model with its document prompt and
max_seq_length) shared by every system that uses it (``dense:m``, ``hybrid:bm25+dense:m``,
``rerank:x@dense:m``). Its key is the one ``tasks.embed.embed_corpus`` computes, so chunks encoded
here, in any process, are the Parquet parts the retrieval later reads. ``encode_shard`` runs one
chunk range of a job (a Dask worker's share); ``encode_job`` runs a whole job in one call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from irflow.tasks.core.config import cache_dir
from irflow.tasks.core.schema import Dataset
from irflow.tasks.embed import vectors as embed
from irflow.tasks.embed.cache import CHUNK_SIZE, encode_chunks, part_path
from irflow.tasks.embed.inference import load_encoder
from irflow.tasks.systems.specs import DenseSpec, SystemSpec, as_spec, leaves

if TYPE_CHECKING:
    from irflow.tasks.embed.models import Encoder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbedJob:
    """One corpus encoding: the dense spec that asks for it, its cache key and its number of chunks."""

    system: str  # canonical dense spec
    model: str
    key: str
    key_dir: Path
    chunks: int

    @property
    def complete(self) -> bool:
        """True once every part was encoded and checked (``_COMPLETE`` written)."""
        return (self.key_dir / "_COMPLETE").is_file()


def corpus_job(dataset: Dataset, spec: DenseSpec) -> EmbedJob:
    """The corpus encoding of ``spec`` on ``dataset``, keyed exactly as ``tasks.embed.embed_corpus`` keys it."""
    key = embed.corpus_key(dataset, spec)
    chunks = -(-len(dataset.corpus) // CHUNK_SIZE)
    return EmbedJob(str(spec), spec.model, key, cache_dir() / "embeddings" / key, chunks)


def embed_jobs(dataset: Dataset, systems: Iterable[str | SystemSpec]) -> list[EmbedJob]:
    """Distinct corpus encodings the systems need, in first-use order."""
    jobs: dict[str, EmbedJob] = {}
    for system in systems:
        for leaf in leaves(as_spec(system)):
            if isinstance(leaf, DenseSpec):
                job = corpus_job(dataset, leaf)
                jobs.setdefault(job.key, job)
    return list(jobs.values())


def shards(job: EmbedJob, count: int) -> list[list[int]]:
    """Split a job's chunk indices into at most ``count`` contiguous, non-empty shards."""
    count = max(1, min(count, job.chunks))
    size = -(-job.chunks // count)
    return [list(range(i, min(i + size, job.chunks))) for i in range(0, job.chunks, size)]


def load_first(job: EmbedJob, chunk_indices: Iterable[int], model: Encoder) -> dict[str, float]:
    """``{"load_seconds": s}``: the model loaded (import, weights, graph) when some part of ``chunk_indices``
    is still to be encoded, so that the encoding's own seconds start at its first batch; ``{}`` when every
    part is there (a fully cached key pays no import)."""
    if job.complete or all(part_path(job.key_dir, i).is_file() for i in chunk_indices):
        return {}
    start = time.perf_counter()
    load_encoder(model)
    return {"load_seconds": time.perf_counter() - start}


def encode_shard(dataset: Dataset, job: EmbedJob, chunk_indices: Sequence[int]) -> dict[str, Any]:
    """Make parts ``chunk_indices`` of the job exist (encoding the missing ones); returns counts, seconds
    of encoding and, when it had to load the model first, ``load_seconds`` (see :func:`load_first`)."""
    spec = as_spec(job.system)
    assert isinstance(spec, DenseSpec)
    model = embed.model_for(spec)
    loaded = load_first(job, chunk_indices, model)
    start = time.perf_counter()
    counts = encode_chunks(
        job.key_dir,
        dataset.corpus["doc_id"].astype(str).tolist(),
        embed.document_texts(dataset.corpus),
        chunk_indices,
        model,
        prompt=model.prompt("document", spec.doc_prompt),
        max_seq_length=spec.max_seq_length,
        batch_size=spec.batch_size,
    )
    return {**counts, "seconds": time.perf_counter() - start, **loaded}


def encode_job(dataset: Dataset, job: EmbedJob) -> dict[str, Any]:
    """Encode (or read back) the whole job and mark it complete; returns counts, seconds of encoding (from
    the first batch) and, when some text was still to be encoded, ``load_seconds`` of the model before it."""
    spec = as_spec(job.system)
    assert isinstance(spec, DenseSpec)
    model = embed.model_for(spec)
    loaded = load_first(job, range(job.chunks), model)
    start = time.perf_counter()
    spent = embed.api_spent(model)  # an API model's calls and tokens (its cost)
    done = embed.embed_corpus(dataset, spec, model=model)
    if done.key != job.key:  # the vectors are right, but shards went elsewhere and the Prefect cache never hits
        log.warning("embedding key drift for %s: planned %s, tasks.embed used %s", job.system, job.key, done.key)
    return {
        "encoded": done.encoded,
        "from_cache": done.from_cache,
        "seconds": time.perf_counter() - start,
        "key": done.key,
        **loaded,
        **spent(),
    }


__all__ = ["EmbedJob", "corpus_job", "embed_jobs", "encode_job", "encode_shard", "shards"]
