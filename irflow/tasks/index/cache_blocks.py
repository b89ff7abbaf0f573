"""``dense(index=blocks)`` out of core: a dataset's corpus vectors streamed from the embedding cache's
Parquet parts into :func:`tasks.index.blocks.block_search`, never assembled into one matrix.

Parts are read in part order; part ``c`` holds the corpus rows ``plan_chunks(texts)[c]`` (longest
text first), so every vector keeps its corpus row and ties at the k-th score keep the lower corpus
row, as :mod:`tasks.index.blocks` promises. A missing or damaged part is encoded (and cached) when the
stream reaches it. Memory: one block of ``block_size`` rows, one part, and the running top-k. Scores
are exact inner products computed by FAISS; their blocks follow part order, not the corpus order
of the in-memory flat index, so a score can differ from the flat index's in its last bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.config import cache_dir
from irflow.tasks.embed.cache import Embeddings, encode_chunks, part_path, plan_chunks, read_part, texts_key
from irflow.tasks.index.blocks import Block, BlockStats, TopK, aligned_block_size, block_search
from irflow.tasks.index.faiss_index import resolve_params

if TYPE_CHECKING:
    from irflow.tasks.core.schema import Dataset
    from irflow.tasks.embed.models import Encoder
    from irflow.tasks.systems.specs import DenseSpec


@dataclass
class CacheBlocksIndex:
    """Exact search over one embedding-cache key, streamed part by part (a ``tasks.index.SearchIndex``)."""

    key_dir: Path
    ids: list[str]
    texts: list[str]
    model: Encoder
    prompt: str
    max_seq_length: int | None
    batch_size: int
    block_size: int
    kind: str = "blocks"
    build_seconds: float = 0.0
    encoded: int = 0
    stats: BlockStats = field(default_factory=BlockStats)

    def search(self, queries: np.ndarray, k: int) -> TopK:
        return block_search(queries, self.blocks(), max(0, min(int(k), len(self.ids))), self.stats)

    def blocks(self) -> Iterator[Block]:
        """Blocks of at most ``block_size`` rows (rounded up to the BLAS grid), in part order."""
        size = aligned_block_size(self.block_size)
        pending_rows: list[np.ndarray] = []
        pending: list[np.ndarray] = []
        held = 0
        for chunk, rows in enumerate(plan_chunks(self.texts)):
            matrix = self.part(chunk, rows)
            while len(matrix):
                take = size - held
                pending_rows.append(rows[:take])
                pending.append(matrix[:take])
                held += len(pending[-1])
                rows, matrix = rows[take:], matrix[take:]
                if held == size:
                    yield np.concatenate(pending_rows), np.concatenate(pending)
                    pending_rows, pending, held = [], [], 0
        if held:
            yield np.concatenate(pending_rows), np.concatenate(pending)

    def part(self, chunk: int, rows: np.ndarray) -> np.ndarray:
        """Part ``chunk``'s vectors, checked against the ids it must hold; encoded first if missing or bad."""
        expected = [self.ids[i] for i in rows]
        matrix = read_part(part_path(self.key_dir, chunk), expected)
        if matrix is None:
            counts = encode_chunks(
                self.key_dir,
                self.ids,
                self.texts,
                [chunk],
                self.model,
                prompt=self.prompt,
                max_seq_length=self.max_seq_length,
                batch_size=self.batch_size,
            )
            self.encoded += counts.get("encoded", 0)
            matrix = read_part(part_path(self.key_dir, chunk), expected)
            if matrix is None:
                raise RuntimeError(f"{part_path(self.key_dir, chunk)}: still unreadable after encoding it")
        return matrix

    def tracking(self) -> dict[str, Any]:
        return {
            "index": self.kind,
            "index_build_seconds": self.build_seconds,
            "index_block_size": aligned_block_size(self.block_size),
            "index_blocks": self.stats.blocks,
            "index_max_block_rows": self.stats.max_block_rows,
        }


def streamed_corpus(dataset: Dataset, spec: DenseSpec, model: Encoder) -> tuple[Embeddings, CacheBlocksIndex]:
    """The corpus side of ``dense_search`` for ``index=blocks``: an :class:`Embeddings` without its
    matrix (ids, key, folder, dimension) and the index that streams the vectors from the cache."""
    from irflow.tasks.embed.vectors import role_texts

    ids, texts = role_texts(dataset, "document")
    prompt = model.prompt("document", spec.doc_prompt)
    key, payload = texts_key(ids, texts, model, role="document", prompt=prompt, max_seq_length=spec.max_seq_length)
    key_dir = cache_dir() / "embeddings" / key
    if not (key_dir / "_key.json").is_file():
        write_json(key_dir / "_key.json", payload)
    plan = plan_chunks(texts)
    missing = [c for c in range(len(plan)) if not part_path(key_dir, c).is_file()]
    encoded = 0
    if missing:  # encode what no process has yet (a damaged part is re-encoded when the stream meets it)
        encoded = encode_chunks(
            key_dir,
            ids,
            texts,
            missing,
            model,
            prompt=prompt,
            max_seq_length=spec.max_seq_length,
            batch_size=spec.batch_size,
        )["encoded"]
    block_size = resolve_params("blocks", spec.index_params, len(ids), 0)["block_size"]
    index = CacheBlocksIndex(key_dir, ids, texts, model, prompt, spec.max_seq_length, spec.batch_size, block_size)
    first = index.part(0, plan[0]) if ids else np.empty((0, 0), np.float32)
    info = {"prompt": prompt, "dim": int(first.shape[1]), "count": len(ids), "key": key}
    docs = Embeddings(ids, np.empty((0, first.shape[1]), np.float32), key, key_dir, encoded, len(ids) - encoded, info)
    return docs, index
