"""Out-of-core dense search: exact inner-product top-k over vectors streamed in blocks, and IVF-PQ
trained on a sample, for corpora whose vectors do not fit in memory (MS MARCO: 8.8M × 384 float32).

A *block* is ``(rows, matrix)``: the global row numbers of ``matrix``'s vectors, ascending. Sources
yield blocks of at most ``block_size`` rows, from an in-memory matrix (:func:`array_blocks`) or from
Parquet parts laid out like the embedding cache (:func:`parquet_blocks`), so only one block is held.

Exact search is a map and a merge: :func:`search_block` gives a block's partial top-k (a pure
function, so a flow can run it on Dask workers, one row range each) and :func:`merge_topk` folds
partials into the running top-k. The result equals FAISS ``IndexFlatIP.search`` over the whole matrix
(scores bit for bit, the same rows in the same order) when the blocks are cut on FAISS's own BLAS
grid: every block starts at a multiple of ``faiss.cvar.distance_compute_blas_database_bs`` (1024), so
each GEMM FAISS runs on the whole matrix is run on exactly the same rows here (:func:`aligned_block_size`
rounds a block size up to that grid; an unaligned cut changes float rounding in the last bits).
One rule for exact ties at the k-th score: the lower row is kept (a total order, the same for every
block size and worker count); FAISS's own heap keeps a run of tied rows that depends on the order it
met them in. Results are listed as FAISS lists them: score descending, ties by row descending.

``faiss`` is imported inside functions so that importing this module stays cheap.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from irflow.tasks.core.schema import InputError

Block = tuple[np.ndarray, np.ndarray]  # (global rows int64 ascending, vectors float32 (n, d))
TopK = tuple[np.ndarray, np.ndarray]  # (scores float32 (nq, k), rows int64 (nq, k)); row -1 = no hit


def blas_grid() -> int:
    """FAISS's database block of its BLAS path: flat search computes scores in GEMMs of this many rows."""
    import faiss

    return int(faiss.cvar.distance_compute_blas_database_bs)


def aligned_block_size(block_size: int) -> int:
    """``block_size`` rounded up to a multiple of :func:`blas_grid` (results then equal the flat index's)."""
    if isinstance(block_size, bool) or int(block_size) < 1:
        raise InputError(f"block_size must be a positive integer, got {block_size!r}")
    grid = blas_grid()
    return -(-int(block_size) // grid) * grid


# ---------------------------------------------------------------------------------------------
# map and merge


def empty_topk(nq: int, k: int) -> TopK:
    return np.full((nq, k), -np.inf, np.float32), np.full((nq, k), -1, np.int64)


def search_block(queries: np.ndarray, block: Block, k: int) -> TopK:
    """The block's top-``k`` by inner product, rows global: ``(scores (nq, k), rows (nq, k))``.

    Pure (no state): a worker can run it on its own block and send back ``nq × k`` pairs. FAISS
    computes the scores; which rows tie at the k-th score is settled here (FAISS's heap would keep
    whichever it met in a given order): it asks for one row more than k, and for twice as many
    while the last row asked for still ties with the k-th, so every tied row is seen.
    """
    import faiss

    rows, vectors = block
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, k = len(rows), int(k)
    if min(k, n) == 0 or len(queries) == 0:
        return empty_topk(len(queries), k)
    ask = min(n, k + 1)
    while True:
        scores, local = faiss.knn(queries, vectors, ask, metric=faiss.METRIC_INNER_PRODUCT)
        if ask == n or ask <= k or not np.any(scores[:, -1] == scores[:, k - 1]):
            break
        ask = min(n, 2 * ask)
    found = np.where(local >= 0, np.asarray(rows, dtype=np.int64)[np.maximum(local, 0)], -1)
    return merge_topk([(scores, found)], k)


def merge_topk(partials: Iterable[TopK], k: int) -> TopK:
    """The top-``k`` of several partial results (of disjoint rows): keeps the higher score, then the
    lower row; lists them score descending, ties by row descending (FAISS's order)."""
    parts = list(partials)
    if not parts:
        raise ValueError("nothing to merge")
    scores = np.hstack([p[0] for p in parts])
    rows = np.hstack([p[1] for p in parts])
    missing = rows < 0
    rank_rows = np.where(missing, np.iinfo(np.int64).max, rows)  # no hit sorts after every real row
    keep = np.lexsort((rank_rows, -scores.astype(np.float64)), axis=1)[:, :k]
    scores, rows = np.take_along_axis(scores, keep, 1), np.take_along_axis(rows, keep, 1)
    order = np.lexsort((-rows, -scores.astype(np.float64)), axis=1)
    scores, rows = np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)
    if scores.shape[1] < k:
        pad_scores, pad_rows = empty_topk(len(scores), k - scores.shape[1])
        scores, rows = np.hstack([scores, pad_scores]), np.hstack([rows, pad_rows])
    return scores, rows


@dataclass
class BlockStats:
    """What a block search did: blocks and rows read, the largest block, and the seconds it took."""

    blocks: int = 0
    rows: int = 0
    max_block_rows: int = 0
    seconds: float = 0.0


def block_search(queries: np.ndarray, blocks: Iterable[Block], k: int, stats: BlockStats | None = None) -> TopK:
    """Exact top-``k`` over every block of ``blocks``, holding one block and the running top-k at a time.

    Returns ``(scores, rows)`` like FAISS ``IndexFlatIP.search`` (row -1, score -inf: fewer than k rows).
    """
    start = time.perf_counter()
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    best = empty_topk(len(queries), int(k))
    for block in blocks:
        best = merge_topk([best, search_block(queries, block, k)], int(k))
        if stats is not None:
            stats.blocks += 1
            stats.rows += len(block[0])
            stats.max_block_rows = max(stats.max_block_rows, len(block[0]))
        del block  # the next block is read only once this one is gone
    if stats is not None:
        stats.seconds += time.perf_counter() - start
    return best


def row_ranges(n: int, block_size: int, workers: int = 1) -> list[tuple[int, int]]:
    """Split rows ``[0, n)`` into ``workers`` contiguous ranges cut on the block grid (for Dask mapping)."""
    block_size = aligned_block_size(block_size)
    blocks = -(-n // block_size)
    per = -(-blocks // max(1, int(workers))) if blocks else 0
    return [
        (i * per * block_size, min(n, (i + 1) * per * block_size))
        for i in range(max(1, int(workers)))
        if i * per * block_size < n
    ]


# ---------------------------------------------------------------------------------------------
# sources


def array_blocks(vectors: np.ndarray, block_size: int, start: int = 0, stop: int | None = None) -> Iterator[Block]:
    """Blocks of rows ``[start, stop)`` of an in-memory (or memory-mapped) matrix, on the BLAS grid."""
    block_size = aligned_block_size(block_size)
    stop = len(vectors) if stop is None else min(stop, len(vectors))
    for lo in range(start, stop, block_size):
        hi = min(stop, lo + block_size)
        yield np.arange(lo, hi, dtype=np.int64), vectors[lo:hi]


def parquet_parts(folder: str | Path) -> list[Path]:
    """The ``part-*.parquet`` files of an embedding-cache folder, in part order."""
    parts = sorted(Path(folder).glob("part-*.parquet"))
    if not parts:
        raise InputError(f"{folder}: no part-*.parquet files (vectors are cached as parts by the embed stage)")
    return parts


def read_vectors(path: Path, batch_rows: int) -> Iterator[np.ndarray]:
    """The ``vector`` column of one Parquet file, ``batch_rows`` rows at a time (float32 (n, d))."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    handle = pq.ParquetFile(path)
    field = handle.schema_arrow.field("vector") if "vector" in handle.schema_arrow.names else None
    if field is None or not pa.types.is_fixed_size_list(field.type) or field.type.value_type != pa.float32():
        found = field.type if field is not None else "no such column"
        raise InputError(f"{path}: column 'vector' must be fixed_size_list<float32>, found {found}")
    width = field.type.list_size
    for batch in handle.iter_batches(batch_size=batch_rows, columns=["vector"]):
        matrix = batch.column(0).flatten().to_numpy(zero_copy_only=False).reshape(len(batch), width)
        if not np.isfinite(matrix).all():
            raise InputError(f"{path}: non-finite values in column 'vector'")
        yield matrix


def parquet_blocks(
    parts: Sequence[str | Path],
    block_size: int,
    start: int = 0,
    stop: int | None = None,
    reader: Callable[[Path, int], Iterator[np.ndarray]] = read_vectors,
) -> Iterator[Block]:
    """Blocks of rows ``[start, stop)`` of the vectors stored in ``parts`` (read in order, row i = the
    i-th vector of the concatenation), on the BLAS grid. Holds one block plus one Parquet batch."""
    block_size = aligned_block_size(block_size)
    if start % block_size:
        raise ValueError(f"start={start} must lie on the block grid ({block_size} rows)")
    stop = np.iinfo(np.int64).max if stop is None else stop
    pending: list[np.ndarray] = []
    held, first, offset = 0, start, 0
    for path in parts:
        if offset >= stop:
            break
        count = parquet_rows([path])
        if offset + count <= start:  # before the range: skipped from its footer, nothing decoded
            offset += count
            continue
        for matrix in reader(Path(path), block_size):
            lo = offset
            offset += len(matrix)
            matrix = matrix[max(0, start - lo) : max(0, min(len(matrix), stop - lo))]
            while len(matrix):
                take = matrix[: block_size - held]
                pending.append(take)
                held += len(take)
                matrix = matrix[len(take) :]
                if held == block_size:
                    yield _emit(pending, first, held)
                    pending, first, held = [], first + held, 0
    if held:
        yield _emit(pending, first, held)


def _emit(pieces: list[np.ndarray], first: int, held: int) -> Block:
    return np.arange(first, first + held, dtype=np.int64), np.concatenate(pieces) if len(pieces) > 1 else pieces[0]


def parquet_rows(parts: Sequence[str | Path]) -> int:
    """How many vectors ``parts`` hold (from the Parquet footers, nothing decoded)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in parts)


def search_rows(
    parts: Sequence[str | Path], start: int, stop: int, queries: np.ndarray, k: int, block_size: int
) -> TopK:
    """Exact top-``k`` over rows ``[start, stop)`` of Parquet ``parts`` (a range of :func:`row_ranges`):
    what one Dask worker runs; :func:`merge_topk` over every range's result gives the whole search."""
    return block_search(queries, parquet_blocks(parts, block_size, start, stop), k)


# ---------------------------------------------------------------------------------------------
# IVF-PQ trained on a sample


def sample_rows(blocks: Iterable[Block], size: int, n: int, seed: int = 1234) -> np.ndarray:
    """``size`` vectors drawn uniformly (seeded) from ``n`` rows, gathered in one pass over ``blocks``."""
    pick = np.sort(np.random.default_rng(seed).choice(n, size=min(size, n), replace=False))
    out: list[np.ndarray] = []
    for rows, vectors in blocks:
        lo, hi = np.searchsorted(pick, [rows[0], rows[-1] + 1])
        out.append(np.asarray(vectors[pick[lo:hi] - rows[0]], dtype=np.float32))
    return np.concatenate(out) if out else np.empty((0, 0), np.float32)


def train_ivfpq(sample: np.ndarray, nlist: int, m: int, nbits: int = 8, seed: int = 1234) -> Any:
    """An untrained-then-trained FAISS ``IndexIVFPQ`` (inner product) fitted on ``sample`` only."""
    import faiss

    d = sample.shape[1]
    if d % m:
        raise InputError(f"m={m} must divide the vector dimension {d}")
    index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, int(nlist), int(m), int(nbits), faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    index.pq.cp.seed = seed
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    return index


def add_blocks(index: Any, blocks: Iterable[Block]) -> int:
    """Add every block to ``index`` under its global rows (blocks must come in row order); returns rows added."""
    added = 0
    for rows, vectors in blocks:
        if rows[0] != index.ntotal:
            raise ValueError(f"block starts at row {rows[0]}, the index holds {index.ntotal}: add blocks in order")
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        added += len(rows)
    return added


def recall_at_k(found: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Mean recall@k: the share of each query's exact top-k rows that ``found``'s first k contain."""
    k = min(int(k), exact.shape[1])
    if k == 0 or len(exact) == 0:
        return float("nan")
    hits = [len(np.intersect1d(f[:k][f[:k] >= 0], e[:k][e[:k] >= 0])) / k for f, e in zip(found, exact)]
    return float(np.mean(hits))


# ---------------------------------------------------------------------------------------------
# the ``blocks`` index of dense systems


@dataclass
class BlockIndex:
    """``dense(index=blocks,block_size=N)``: exact search in blocks of N rows (rounded up to the BLAS
    grid) over the vectors, with results equal to the flat index's (a :class:`tasks.index.SearchIndex`)."""

    vectors: np.ndarray
    block_size: int
    kind: str = "blocks"
    build_seconds: float = 0.0
    stats: BlockStats | None = None

    def search(self, queries: np.ndarray, k: int) -> TopK:
        k = max(0, min(int(k), len(self.vectors)))
        self.stats = self.stats or BlockStats()
        return block_search(queries, array_blocks(self.vectors, self.block_size), k, self.stats)

    def tracking(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.kind,
            "index_build_seconds": self.build_seconds,
            "index_block_size": aligned_block_size(self.block_size),
        }
        if self.stats is not None:
            out["index_blocks"] = self.stats.blocks
        return out
