"""Out-of-core exact search (``tasks.index.blocks``): block by block equals FAISS's flat index, streamed
from the embedding cache's Parquet parts, one block held at a time; IVF-PQ from a sample; and
``dense(index=blocks)`` in a real evaluation of the demo dataset."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from irflow.tasks.core.schema import InputError
from irflow.tasks.index import blocks as bs

GRID = 64  # FAISS's BLAS database block, lowered so that small tests cut several blocks


@pytest.fixture(autouse=True)
def small_blas_grid() -> Iterator[None]:
    import faiss

    before = faiss.cvar.distance_compute_blas_database_bs
    faiss.cvar.distance_compute_blas_database_bs = GRID
    yield
    faiss.cvar.distance_compute_blas_database_bs = before


def _tied_corpus(n: int, d: int, distinct: int, seed: int) -> np.ndarray:
    """Unit vectors drawn from ``distinct`` prototypes: most scores tie with many others."""
    rng = np.random.default_rng(seed)
    proto = rng.standard_normal((distinct, d)).astype(np.float32)
    proto /= np.linalg.norm(proto, axis=1, keepdims=True)
    return np.ascontiguousarray(proto[rng.integers(0, distinct, n)])


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _flat(vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    import faiss

    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    scores, rows = index.search(queries, k)
    return scores, rows.astype(np.int64)


@pytest.mark.parametrize("nq", [3, 40])  # FAISS's per-query kernel and its BLAS path
@pytest.mark.parametrize("k", [10, 700])  # 700 > every block size below
def test_block_search_equals_faiss_flat_with_ties(nq: int, k: int) -> None:
    n, d = 1000, 32  # 1000 rows: no block size below divides it
    vectors = np.vstack([_tied_corpus(n - 200, d, 60, 1), np.random.default_rng(2).standard_normal((200, d))])
    vectors = np.ascontiguousarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), dtype=np.float32)
    queries = np.random.default_rng(3).standard_normal((nq, d)).astype(np.float32)
    flat_scores, flat_rows = _flat(vectors, queries, k)
    full_scores, full_rows = _flat(vectors, queries, n)  # every row's score, as the flat index computes it
    score_of = np.empty((nq, n), np.float32)
    np.put_along_axis(score_of, full_rows, full_scores, 1)
    assert (np.diff(flat_scores, axis=1) == 0).sum() > nq, "the data must tie inside the top-k"

    results = {}
    for block_size in (1, 100, 333, n):  # rounded up to the grid: 64, 128, 384, 1024 rows
        stats = bs.BlockStats()
        scores, rows = bs.block_search(queries, bs.array_blocks(vectors, block_size), k, stats)
        assert stats.max_block_rows == min(n, bs.aligned_block_size(block_size)) and stats.rows == n
        results[block_size] = (scores, rows)
        assert np.array_equal(scores, flat_scores)  # bit for bit
        for q in range(nq):
            cut = flat_scores[q, -1]
            above = flat_scores[q] > cut
            # above the k-th score: the same rows in the same order (ties listed by row descending)
            assert np.array_equal(rows[q, above], flat_rows[q, above])
            tied_at_cut = np.flatnonzero(score_of[q] == cut)
            if len(tied_at_cut) == int((~above).sum()):  # nothing tied beyond the cut: identical
                assert np.array_equal(rows[q], flat_rows[q])
            else:  # FAISS's heap keeps some run of the tied rows; blocks keep the lowest
                assert np.array_equal(rows[q, ~above], tied_at_cut[: int((~above).sum())][::-1])
        np.testing.assert_array_equal(score_of[np.arange(nq)[:, None], rows], scores)
    for scores, rows in results.values():  # the same whatever the block size
        assert np.array_equal(rows, results[1][1]) and np.array_equal(scores, results[1][0])


def test_partials_on_row_ranges_merge_to_the_same_result_in_any_order() -> None:
    """The Dask shape: a pure search per row range, one merge, in whatever order workers finish."""
    vectors = _tied_corpus(1500, 16, 40, 4)
    queries = np.random.default_rng(5).standard_normal((25, 16)).astype(np.float32)
    whole = bs.block_search(queries, bs.array_blocks(vectors, GRID), 50)
    ranges = bs.row_ranges(len(vectors), GRID, workers=3)
    assert ranges[0][0] == 0 and ranges[-1][1] == 1500 and len(ranges) == 3
    assert all(a[1] == b[0] and a[1] % GRID == 0 for a, b in zip(ranges, ranges[1:]))
    partials = [bs.block_search(queries, bs.array_blocks(vectors, GRID, lo, hi), 50) for lo, hi in ranges]
    for order in ([0, 1, 2], [2, 0, 1]):
        merged = bs.merge_topk([partials[i] for i in order], 50)
        assert np.array_equal(merged[0], whole[0]) and np.array_equal(merged[1], whole[1])


def test_row_ranges_searched_on_dask_workers(tmp_path: Path) -> None:
    """A real Dask cluster (two in-process workers) maps ``search_rows`` over row ranges of Parquet
    parts; the merge of what the workers send back is the flat index's top-k."""
    from dask.distributed import Client, LocalCluster

    vectors = _unit(2000, 16, 11)
    parts = _write_parts(tmp_path, vectors, [1000, 1000])
    queries = np.random.default_rng(12).standard_normal((30, 16)).astype(np.float32)
    ranges = bs.row_ranges(len(vectors), 256, workers=2)
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        futures = [client.submit(bs.search_rows, parts, lo, hi, queries, 50, 256, pure=True) for lo, hi in ranges]
        partials = client.gather(futures)
        workers = set().union(*client.who_has(futures).values())  # where each range was searched
    scores, rows = bs.merge_topk(partials, 50)
    flat = _flat(vectors, queries, 50)
    assert len(workers) == 2 and len(partials) == 2
    assert np.array_equal(scores, flat[0]) and np.array_equal(rows, flat[1])


def _write_parts(folder: Path, vectors: np.ndarray, sizes: list[int]) -> list[Path]:
    from irflow.tasks.embed.cache import part_path, write_part

    bounds = np.cumsum([0, *sizes])
    assert bounds[-1] == len(vectors)
    for chunk, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        write_part(part_path(folder, chunk), [f"d{i}" for i in range(lo, hi)], vectors[lo:hi])
    return bs.parquet_parts(folder)


def test_streamed_from_embedding_cache_parts(tmp_path: Path) -> None:
    """Parts written by the embed cache's own writer, of uneven sizes, read block by block (and by row
    range, as a worker would) give the flat index's result over the concatenated vectors."""
    vectors = _unit(1300, 24, 6)
    parts = _write_parts(tmp_path, vectors, [200, 77, 500, 1, 522])
    assert bs.parquet_rows(parts) == 1300
    queries = np.random.default_rng(7).standard_normal((30, 24)).astype(np.float32)
    flat = _flat(vectors, queries, 100)
    streamed = bs.block_search(queries, bs.parquet_blocks(parts, 100), 100)
    assert np.array_equal(streamed[0], flat[0]) and np.array_equal(streamed[1], flat[1])
    ranges = bs.row_ranges(1300, 100, workers=4)
    merged = bs.merge_topk([bs.search_rows(parts, lo, hi, queries, 100, 100) for lo, hi in ranges], 100)
    assert np.array_equal(merged[1], flat[1])
    tied = _tied_corpus(1300, 24, 300, 6)  # with ties: the same rule as blocks of a matrix
    tied_parts = _write_parts(tmp_path / "tied", tied, [700, 600])
    from_parts = bs.block_search(queries, bs.parquet_blocks(tied_parts, 100), 100)
    from_array = bs.block_search(queries, bs.array_blocks(tied, 100), 100)
    assert np.array_equal(from_parts[1], from_array[1]) and np.array_equal(from_parts[0], from_array[0])
    read = [rows for rows, _ in bs.parquet_blocks(parts, 100, 256, 640)]
    assert np.array_equal(np.concatenate(read), np.arange(256, 640)) and max(map(len, read)) == 128


def test_bad_part_is_named(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": ["a"], "vector": [[1.0, 2.0]]}), tmp_path / "part-00000.parquet")
    with pytest.raises(
        InputError, match=r"part-00000\.parquet: column 'vector' must be fixed_size_list<float32>, found list"
    ):
        list(bs.parquet_blocks(bs.parquet_parts(tmp_path), 64))
    with pytest.raises(InputError, match="missing: no part-"):
        bs.parquet_parts(tmp_path / "missing")


def test_one_block_held_at_a_time(tmp_path: Path) -> None:
    """Instrumented reader and blocks: the search never keeps a block once it asks for the next, no
    block exceeds block_size rows, and what the reader has decoded and not freed stays within one
    block plus one batch."""
    vectors = _unit(3000, 16, 8)
    parts = _write_parts(tmp_path, vectors, [1000, 1000, 1000])
    block_size = 256
    live_batches: list[weakref.ref[np.ndarray]] = []
    most_rows_live = 0

    def reader(path: Path, rows: int) -> Iterator[np.ndarray]:
        nonlocal most_rows_live
        for matrix in bs.read_vectors(path, rows):
            alive = [r() for r in live_batches]
            most_rows_live = max(most_rows_live, len(matrix) + sum(len(a) for a in alive if a is not None))
            live_batches.append(weakref.ref(matrix))
            yield matrix

    held: list[weakref.ref[np.ndarray]] = []
    sizes: list[int] = []

    def watched() -> Iterator[bs.Block]:
        for rows, matrix in bs.parquet_blocks(parts, block_size, reader=reader):
            assert all(r() is None for r in held), "an earlier block is still held"
            held.append(weakref.ref(matrix))
            sizes.append(len(rows))
            yield rows, matrix
            del matrix

    queries = np.random.default_rng(9).standard_normal((5, 16)).astype(np.float32)
    scores, rows = bs.block_search(queries, watched(), 20)
    assert max(sizes) == block_size and sum(sizes) == 3000 and len(sizes) == 12
    assert most_rows_live <= 2 * block_size, most_rows_live
    assert np.array_equal(rows, _flat(vectors, queries, 20)[1])


def test_ivfpq_from_a_sample_and_recall_against_exact(tmp_path: Path) -> None:
    """Recall@k as the share of the exact top-k found, checked by hand and against the index module's
    own recall (no ties here, so both definitions agree); IVF-PQ trained on a sample, filled in blocks."""
    from irflow.tasks.index.recall import recall_against_exact

    exact = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    found = np.array([[4, 9, 1, -1], [8, 7, 6, 5]])
    assert bs.recall_at_k(found, exact, 4) == pytest.approx((2 / 4 + 4 / 4) / 2)
    assert bs.recall_at_k(found, exact, 3) == pytest.approx((1 / 3 + 2 / 3) / 2)
    assert bs.recall_at_k(found, exact, 2) == 0.0

    rng = np.random.default_rng(10)
    vectors = (rng.standard_normal((4000, 8)) @ rng.standard_normal((8, 32))).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    parts = _write_parts(tmp_path, vectors, [2048, 1952])
    queries = vectors[:50] + 0.1 * rng.standard_normal((50, 32)).astype(np.float32)
    sample = bs.sample_rows(bs.parquet_blocks(parts, 512), 1000, 4000)
    assert sample.shape == (1000, 32) and all((vectors == row).all(axis=1).any() for row in sample[:20])
    index = bs.train_ivfpq(sample, nlist=16, m=8, nbits=6)
    assert bs.add_blocks(index, bs.parquet_blocks(parts, 512)) == 4000 and index.ntotal == 4000
    _, exact_rows = bs.block_search(queries, bs.parquet_blocks(parts, 512), 10)
    recalls = []
    for nprobe in (1, 16):
        index.nprobe = nprobe
        _, found_rows = index.search(queries, 10)
        recall = bs.recall_at_k(found_rows, exact_rows, 10)
        assert recall == pytest.approx(recall_against_exact(vectors, queries, found_rows, [10])["recall_at_10"])
        recalls.append(recall)
    assert 0.3 < recalls[0] < recalls[1] <= 1.0, recalls
    with pytest.raises(ValueError, match="add blocks in order"):
        bs.add_blocks(index, bs.parquet_blocks(parts, 512, 512))


def test_dense_blocks_option_in_a_real_evaluation_equals_flat(monkeypatch: pytest.MonkeyPatch) -> None:
    """``dense(index=blocks,block_size=100)`` on the demo dataset with the real MiniLM, streamed from the
    embedding cache's parts (the corpus matrix is never assembled): the flat index's run and metrics,
    searched in blocks of 128 rows."""
    from irflow.tasks.ingest import load_dataset
    from irflow.tasks.metrics import evaluate, mean
    from irflow.tasks.retrieve import dense
    from irflow.tasks.retrieve.searchers import retrieve
    from irflow.tasks.systems.specs import parse_system

    spec = parse_system("dense(max_seq_length=64,index=blocks,block_size=100):minilm")
    assert str(spec) == "dense(max_seq_length=64,index=blocks,block_size=100):sentence-transformers/all-MiniLM-L6-v2"
    dataset = load_dataset("techdocs")
    flat = retrieve(dataset, "dense(max_seq_length=64):minilm", depth=1000)

    def assembled(*args: object, **kwargs: object) -> None:
        raise AssertionError("index=blocks must not assemble the corpus matrix")

    monkeypatch.setattr(dense, "embed_corpus", assembled)
    blocks = retrieve(dataset, spec, depth=1000)
    assert blocks.info["index"] == "blocks" and blocks.info["index_block_size"] == 128
    assert blocks.info["index_blocks"] == -(-len(dataset.corpus) // 128) > 1
    assert blocks.info["index_max_block_rows"] == 128 and blocks.info["docs_encoded"] == 0  # read from the cache
    pairs = flat.run.merge(blocks.run, on=["query_id", "doc_id"], suffixes=("_flat", "_blocks"))
    assert len(pairs) == len(flat.run) == len(blocks.run) == len(dataset.queries) * len(dataset.corpus)
    np.testing.assert_allclose(pairs["score_blocks"], pairs["score_flat"], rtol=0, atol=1e-6)
    metrics = ["nDCG@10", "R@100", "RR@10", "AP@100"]
    a, b = (mean(evaluate(r.run, dataset.qrels, metrics)) for r in (flat, blocks))
    assert a == b and a["nDCG@10"] > 0.3
    print("identical runs:", blocks.run.equals(flat.run), a)
