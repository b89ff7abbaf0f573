"""The resumable Parquet cache of vectors: keys, parts, ``_COMPLETE``, and the encode that fills it.

Cache layout (``cache_dir()/embeddings/<key>/``)::

    _key.json            what the key was computed from (for humans; written first)
    part-00000.parquet   columns ``id`` (string) and ``vector`` (fixed_size_list<float32>[d]);
    part-00001.parquet   one file per chunk of CHUNK_SIZE texts, each written atomically
    ...
    _COMPLETE            JSON (counts, dimension, model, prompt), written atomically last
    _lock                held (``fcntl.flock``) by the process encoding the key; says who holds it
    index-<kind>-<hash>.faiss   approximate indexes built from these vectors (tasks.index)

``key`` is a sha256 over: the content (a hash of the ids and texts actually embedded, so a
change of judgements re-encodes nothing and two datasets sharing a corpus share its vectors), the
model identity (Hugging Face commit, else a sha256 of the model's weight and config files), the
role (``query`` | ``document``), the prompt actually prepended, the
``max_seq_length`` (None = the model's own), ``normalize=True``, ``dtype=float32`` and how the
text is built: a document is ``(title + " " + text).strip()`` (the BEIR convention), a query is
its text.

Chunks are planned from the texts alone (longest first, the order sentence-transformers batches
in, then cut every CHUNK_SIZE), so every process plans the same chunks: an interrupted encode
resumes from its finished parts, and ``encode_chunks`` can run disjoint chunk ranges in
parallel (e.g. Dask workers) against the same key directory. A part is trusted only if it
parses and holds exactly the ids its chunk expects, as finite float32 vectors.

One encode per key at a time: ``embed_texts`` holds the key's ``_lock`` (:mod:`irflow.tasks.embed.key_lock`)
while it reads and fills the parts, so a second run of the same system (another process, another flow)
waits, logging who it waits for, and then reads the finished parts instead of encoding them again. The
kernel releases the lock of a killed holder; the waiter then resumes from the parts already written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.tasks.core.atomic import atomic_path, write_json
from irflow.tasks.core.config import cache_dir
from irflow.tasks.core.progress import Progress, plural
from irflow.tasks.embed.inference import encode
from irflow.tasks.embed.key_lock import key_lock
from irflow.tasks.embed.models import resolve_model

if TYPE_CHECKING:
    from irflow.tasks.embed.models import Encoder

log = logging.getLogger(__name__)

CHUNK_SIZE = 2048
"""Texts per Parquet part: large enough that per-part overhead is negligible next to encoding."""
PROGRESS_BATCHES = 16
"""Batches encoded between two progress updates."""
CACHE_FORMAT = 1
DOCUMENT_TEXT = 'document = (title + " " + text).strip()'
QUERY_TEXT = "query = text"
ENCODE_STATS: Counter[str] = Counter()
"""Texts encoded by the model vs read from the cache in this process (``encoded``, ``from_cache``)."""


@dataclass(frozen=True)
class Embeddings:
    """Vectors of ``ids`` (row i ↔ ids[i]), L2-normalised float32, and where they are cached."""

    ids: list[str]
    vectors: np.ndarray
    key: str
    path: Path
    encoded: int  # texts encoded by the model in this call
    from_cache: int  # texts read from finished parts
    info: dict[str, Any] = field(default_factory=dict)


def cache_key(*, source: str, model: str, role: str, prompt: str, max_seq_length: int | None, text: str) -> dict:
    """The key payload: everything the vectors depend on (``key_digest`` hashes it)."""
    if role not in ("query", "document"):
        raise ValueError(f"role must be 'query' or 'document', not {role!r}")
    return {
        "format": CACHE_FORMAT,
        "source": source,
        "model": model,
        "role": role,
        "prompt": prompt,
        "max_seq_length": max_seq_length,
        "normalize": True,
        "dtype": "float32",
        "text": text,
    }


def key_digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def plan_chunks(texts: Sequence[str], chunk_size: int = CHUNK_SIZE) -> list[np.ndarray]:
    """Row indices of each chunk: longest text first (stable), cut every ``chunk_size``.

    Depends on the texts only, so every process plans the same chunks for the same key.
    """
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    order = np.argsort(-lengths, kind="stable")
    return [order[start : start + chunk_size] for start in range(0, len(order), chunk_size)]


def part_path(key_dir: Path, chunk: int) -> Path:
    return Path(key_dir) / f"part-{chunk:05d}.parquet"


def read_part(path: Path, expected_ids: Sequence[str]) -> np.ndarray | None:
    """A part's (n, d) float32 matrix, or None unless it is complete and holds exactly ``expected_ids``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
        vectors = table.column("vector").combine_chunks()
        if not pa.types.is_fixed_size_list(vectors.type) or vectors.type.value_type != pa.float32():
            raise ValueError(f"vector column has type {vectors.type}")
        if table.column("id").to_pylist() != list(expected_ids):
            raise ValueError("ids differ from the chunk plan")
        width = vectors.type.list_size
        matrix = vectors.flatten().to_numpy(zero_copy_only=False).reshape(len(table), width)
        if not np.isfinite(matrix).all():
            raise ValueError("non-finite values")
        return matrix
    except Exception as err:  # garbage, truncated or foreign file: never trusted, re-encoded
        log.warning("ignoring invalid cache part %s: %s", path, err)
        return None


def write_part(path: Path, ids: Sequence[str], vectors: np.ndarray) -> None:
    """Write one part atomically: a reader sees the old file or the complete new one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
    table = pa.table({"id": pa.array(list(ids), pa.string()), "vector": column})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def _chunks(
    key_dir: Path,
    ids: Sequence[str],
    texts: Sequence[str],
    plan: list[np.ndarray],
    chunk_indices: Iterable[int],
    model: Encoder,
    *,
    prompt: str,
    max_seq_length: int | None,
    batch_size: int,
    on_chunk: Callable[[int], None] | None,
    progress: Progress | None = None,
) -> Iterator[tuple[int, np.ndarray, bool]]:
    """Yield ``(chunk, matrix, encoded?)``: each finished part read back, each missing one encoded.

    A missing part is encoded in slices of ``PROGRESS_BATCHES`` batches (its rows are already in
    the longest-first order the model batches in) so ``progress`` moves while a chunk is encoded.
    """
    for chunk in chunk_indices:
        rows = plan[chunk]
        chunk_ids = [ids[i] for i in rows]
        path = part_path(key_dir, chunk)
        matrix = read_part(path, chunk_ids)
        encoded = matrix is None
        if matrix is None:
            step = max(1, batch_size * PROGRESS_BATCHES)
            slices = []
            for start in range(0, len(rows), step):
                some = [texts[i] for i in rows[start : start + step]]
                slices.append(encode(model, some, prompt=prompt, max_seq_length=max_seq_length, batch_size=batch_size))
                if progress is not None:
                    progress.advance(len(some))
            matrix = np.concatenate(slices) if len(slices) > 1 else slices[0]
            write_part(path, chunk_ids, matrix)
        elif progress is not None:
            progress.advance(len(rows), worked=False)
        ENCODE_STATS["encoded" if encoded else "from_cache"] += len(rows)
        if on_chunk is not None:
            on_chunk(chunk)
        yield chunk, matrix, encoded


def encode_chunks(
    key_dir: str | Path,
    ids: Sequence[str],
    texts: Sequence[str],
    chunk_indices: Iterable[int],
    model: Encoder | str,
    *,
    prompt: str,
    max_seq_length: int | None = None,
    batch_size: int = 32,
    chunk_size: int = CHUNK_SIZE,
    on_chunk: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Sharding hook: make parts ``chunk_indices`` of ``key_dir`` exist; returns encoded/from_cache counts.

    Independent workers may run disjoint (or even overlapping) chunk ranges of one key at once;
    ``embed_texts`` afterwards finds every part finished and writes ``_COMPLETE``.
    """
    model = resolve_model(model) if isinstance(model, str) else model
    plan = plan_chunks(texts, chunk_size)
    stats = Counter(encoded=0, from_cache=0)
    for chunk, _, encoded in _chunks(
        Path(key_dir),
        ids,
        texts,
        plan,
        chunk_indices,
        model,
        prompt=prompt,
        max_seq_length=max_seq_length,
        batch_size=batch_size,
        on_chunk=on_chunk,
    ):
        stats["encoded" if encoded else "from_cache"] += len(plan[chunk])
    return dict(stats)


def texts_key(
    ids: Sequence[str],
    texts: Sequence[str],
    model: Encoder,
    *,
    role: str,
    prompt: str,
    max_seq_length: int | None,
    source: str | None = None,
    text_recipe: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The cache key of embedding ``texts`` (and the payload it digests); ``prompt`` as resolved."""
    payload = cache_key(
        source=source or _content_hash(ids, texts),
        model=model.identity,
        role=role,
        prompt=prompt,
        max_seq_length=max_seq_length,
        text=text_recipe or (DOCUMENT_TEXT if role == "document" else QUERY_TEXT),
    )
    return key_digest(payload), payload


def embed_texts(
    ids: Sequence[str],
    texts: Sequence[str],
    model: Encoder | str,
    *,
    role: str,
    prompt: str | None = None,
    max_seq_length: int | None = None,
    batch_size: int = 32,
    source: str | None = None,
    text_recipe: str | None = None,
    chunk_size: int = CHUNK_SIZE,
    on_chunk: Callable[[int], None] | None = None,
) -> Embeddings:
    """Vectors for ``texts``, read from the cache where finished and encoded (and cached) otherwise.

    ``prompt`` None = the model's default for ``role``; "" = no prompt. ``source`` names the text
    collection in the key (a dataset fingerprint); by default it is a hash of ids and texts.
    ``on_chunk(i)`` runs after each part is available (progress, or tests that interrupt).
    """
    model = resolve_model(model) if isinstance(model, str) else model
    ids = [str(i) for i in ids]
    texts = list(texts)
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
    prompt = model.prompt(role, prompt)
    key, payload = texts_key(
        ids,
        texts,
        model,
        role=role,
        prompt=prompt,
        max_seq_length=max_seq_length,
        source=source,
        text_recipe=text_recipe,
    )
    key_dir = cache_dir() / "embeddings" / key
    if not (key_dir / "_key.json").is_file():
        write_json(key_dir / "_key.json", payload)

    plan = plan_chunks(texts, chunk_size)
    vectors: np.ndarray | None = None
    counts = Counter(encoded=0, from_cache=0)
    with key_lock(key_dir), Progress(f"encode {plural(role)}", len(texts), unit="texts") as progress:
        start = time.perf_counter()
        for chunk, matrix, encoded in _chunks(
            key_dir,
            ids,
            texts,
            plan,
            range(len(plan)),
            model,
            prompt=prompt,
            max_seq_length=max_seq_length,
            batch_size=batch_size,
            on_chunk=on_chunk,
            progress=progress,
        ):
            if vectors is None:
                vectors = np.empty((len(texts), matrix.shape[1]), dtype=np.float32)
            vectors[plan[chunk]] = matrix
            counts["encoded" if encoded else "from_cache"] += len(matrix)
        seconds = time.perf_counter() - start
    if vectors is None:
        vectors = np.empty((0, 0), dtype=np.float32)

    info = {
        "model": model.name,
        "model_identity": model.identity,
        "role": role,
        "prompt": prompt,
        "max_seq_length": max_seq_length,
        "count": len(ids),
        "dim": int(vectors.shape[1]),
        "chunks": len(plan),
        "chunk_size": chunk_size,
        "key": key,
    }
    if counts["encoded"] or not (key_dir / "_COMPLETE").is_file():
        write_json(key_dir / "_COMPLETE", {**info, "encode_seconds": round(seconds, 3)})
    return Embeddings(ids, vectors, key, key_dir, counts["encoded"], counts["from_cache"], info)


def _content_hash(ids: Sequence[str], texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for i, t in zip(ids, texts):
        digest.update(i.encode() + b"\0" + t.encode() + b"\0")
    return "texts:" + digest.hexdigest()
