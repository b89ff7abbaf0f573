"""Out-of-core dense search at 1M and 2M vectors: block search vs the in-memory flat index, and IVF-PQ.

Synthetic corpus: seeded unit-normalised 384-d float32 vectors with the structure of text embeddings
(a 64-dimensional latent space mapped into 384 dimensions plus isotropic noise at a quarter of the
signal's variance; uniform vectors on the sphere have no neighbours worth finding, so any index looks
bad on them), written as Parquet parts of 2048 rows
(``embed_cache.write_part``, the embedding cache's own layout); 1,000 seeded unit queries; top-100.
Each measurement runs in its own subprocess, whose peak RSS (``ru_maxrss``) is reported beside the
RSS it had after importing numpy, pyarrow and faiss:

* ``flat``: read every part into one matrix, ``IndexFlatIP``, search (what irflow's flat path does);
* ``blocks``: ``block_search`` over ``parquet_blocks`` (one block of BLOCK_SIZE rows held at a time);
* ``ivfpq``: trained on a seeded sample, filled block by block, searched at several ``nprobe``;
  recall@100 against the exact top-100 of the same queries.

Block and flat results are asserted identical (scores bit for bit, rows in order). Writes
``benchmarks/results/out_of_core.json``.
Usage: ``nice python benchmarks/bench_out_of_core.py [--sizes 1000000,2000000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIM = 384
LATENT = 64
QUERIES = 1000
K = 100
BLOCK_SIZE = 65536
PART_ROWS = 2048
NLIST = 2048
M = 96  # 4 dimensions per sub-quantizer, 96 bytes per vector
NBITS = 8
TRAIN = 100_000  # >= 39 × NLIST points, as FAISS's k-means wants
NPROBES = (16, 64, 256)
RESULTS = Path(__file__).parent / "results" / "out_of_core.json"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def write_corpus(folder: Path, n: int, seed: int) -> None:
    """``n`` unit vectors as Parquet parts of PART_ROWS rows, generated part by part (never all in memory)."""
    from irflow.tasks.embed.cache import part_path, write_part

    rng = np.random.default_rng(seed)
    for chunk, lo in enumerate(range(0, n, PART_ROWS)):
        hi = min(n, lo + PART_ROWS)
        write_part(part_path(folder, chunk), [f"d{i}" for i in range(lo, hi)], embeddings(rng, hi - lo, seed))


def embeddings(rng: np.random.Generator, n: int, seed: int) -> np.ndarray:
    """``n`` unit vectors: latent (n, LATENT) through a fixed seeded map to DIM, plus noise."""
    mapping = np.random.default_rng(seed + 7).standard_normal((LATENT, DIM), dtype=np.float32) / np.sqrt(LATENT)
    x = rng.standard_normal((n, LATENT), dtype=np.float32) @ mapping
    x += 0.5 * rng.standard_normal((n, DIM), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def queries(seed: int) -> np.ndarray:
    return embeddings(np.random.default_rng(seed + 1), QUERIES, seed)


# ---------------------------------------------------------------------------------------------
# the measured children (each in its own process)


def child(mode: str, folder: Path, out: Path, seed: int) -> None:
    import faiss

    from irflow.tasks.index import blocks as bs

    q = queries(seed)
    base = rss_mib()
    parts = bs.parquet_parts(folder)
    n = bs.parquet_rows(parts)
    report: dict = {
        "mode": mode,
        "rows": n,
        "rss_after_imports_mib": round(base, 1),
        "threads": faiss.omp_get_max_threads(),
    }
    if mode == "flat":
        start = time.perf_counter()
        matrix = np.empty((n, DIM), np.float32)
        for rows, block in bs.parquet_blocks(parts, BLOCK_SIZE):
            matrix[rows[0] : rows[-1] + 1] = block
        index = faiss.IndexFlatIP(DIM)
        index.add(matrix)
        del matrix  # the index holds its own copy, as build_index's does
        loaded = time.perf_counter()
        scores, rows = index.search(q, K)
        done = time.perf_counter()
        report.update(load_seconds=loaded - start, search_seconds=done - loaded)
        np.save(out / "flat_scores.npy", scores)
        np.save(out / "flat_rows.npy", rows)
    elif mode == "blocks":
        stats = bs.BlockStats()
        start = time.perf_counter()
        scores, rows = bs.block_search(q, bs.parquet_blocks(parts, BLOCK_SIZE), K, stats)
        report.update(
            search_seconds=time.perf_counter() - start,
            block_size=BLOCK_SIZE,
            blocks=stats.blocks,
            max_block_rows=stats.max_block_rows,
        )
        np.save(out / "blocks_scores.npy", scores)
        np.save(out / "blocks_rows.npy", rows)
    else:
        exact = np.load(out / "flat_rows.npy")
        start = time.perf_counter()
        sample = bs.sample_rows(bs.parquet_blocks(parts, BLOCK_SIZE), TRAIN, n, seed)
        index = bs.train_ivfpq(sample, NLIST, M, NBITS)
        del sample
        trained = time.perf_counter()
        bs.add_blocks(index, bs.parquet_blocks(parts, BLOCK_SIZE))
        built = time.perf_counter()
        report.update(
            nlist=NLIST, m=M, nbits=NBITS, train_rows=TRAIN, train_seconds=trained - start, add_seconds=built - trained
        )
        report["index_mib"] = round((index.sa_code_size() + 8) * n / 2**20, 1)  # codes + int64 ids
        per_nprobe = []
        for nprobe in NPROBES:
            index.nprobe = nprobe
            t0 = time.perf_counter()
            _, found = index.search(q, K)
            seconds = time.perf_counter() - t0
            per_nprobe.append(
                {
                    "nprobe": nprobe,
                    "recall_at_100": bs.recall_at_k(found, exact, 100),
                    "recall_at_10": bs.recall_at_k(found[:, :10], exact[:, :10], 10),
                    "search_seconds": seconds,
                    "ms_per_query": 1000 * seconds / len(q),
                }
            )
        report["search"] = per_nprobe
    report["peak_rss_mib"] = round(rss_mib(), 1)
    (out / f"{mode}.json").write_text(json.dumps(report))


def run_child(mode: str, folder: Path, out: Path, seed: int) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--folder", str(folder), "--out", str(out), "--seed", str(seed)]
    subprocess.run(cmd, check=True)
    return json.loads((out / f"{mode}.json").read_text())


def _summary(reports: list[dict]) -> dict:
    """One child's figures over repeats: the first report, with every time listed and its minimum."""
    out = dict(reports[0])
    for key in ("load_seconds", "search_seconds"):
        if key in out:
            out[key + "_repeats"] = [r[key] for r in reports]
            out[key] = min(r[key] for r in reports)
    out["peak_rss_mib"] = max(r["peak_rss_mib"] for r in reports)
    return out


def measure(n: int, seed: int, workdir: Path, repeats: int) -> dict:
    folder, out = workdir / f"corpus-{n}", workdir / f"out-{n}"
    folder.mkdir()
    out.mkdir()
    start = time.perf_counter()
    write_corpus(folder, n, seed)
    written = time.perf_counter() - start
    parquet_mib = sum(p.stat().st_size for p in folder.glob("part-*.parquet")) / 2**20
    runs: dict[str, list[dict]] = {"flat": [], "blocks": []}
    for _ in range(repeats):  # interleaved, so load on the shared machine hits both alike
        for mode in runs:
            runs[mode].append(run_child(mode, folder, out, seed))
        same_scores = np.array_equal(np.load(out / "flat_scores.npy"), np.load(out / "blocks_scores.npy"))
        same_rows = np.array_equal(np.load(out / "flat_rows.npy"), np.load(out / "blocks_rows.npy"))
        assert same_scores and same_rows, f"block search differs from the flat index at n={n}"
    flat, blocks = (_summary(runs[mode]) for mode in ("flat", "blocks"))
    ivfpq = run_child("ivfpq", folder, out, seed)
    for path in folder.glob("*"):
        path.unlink()
    return {
        "rows": n,
        "dim": DIM,
        "queries": QUERIES,
        "k": K,
        "vectors_mib": round(n * DIM * 4 / 2**20, 1),
        "parquet_mib": round(parquet_mib, 1),
        "write_seconds": round(written, 1),
        "identical_to_flat": {"scores": bool(same_scores), "rows": bool(same_rows)},
        "flat": flat,
        "blocks": blocks,
        "ivfpq": ivfpq,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,2000000")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--repeats", type=int, default=2, help="flat and block runs, interleaved")
    parser.add_argument("--child")
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.folder, args.out, args.seed)
        return
    load_before = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="irflow-ooc-") as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            results.append(measure(n, args.seed, Path(tmp), args.repeats))
            print(json.dumps(results[-1], indent=1), flush=True)
    payload = {
        "benchmark": "out_of_core",
        "command": f"nice python benchmarks/bench_out_of_core.py --sizes {args.sizes} --repeats {args.repeats}",
        "machine": {"cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()},
        "note": "shared 2-core machine: flat and block runs interleaved, times are the minimum over repeats "
        "(all listed); the load averages say how busy it was",
        "block_size": BLOCK_SIZE,
        "ivfpq": {"nlist": NLIST, "m": M, "nbits": NBITS, "train_rows": TRAIN, "nprobe": list(NPROBES)},
        "sizes": results,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = RESULTS.with_suffix(".json.tmp")
    tmp_path.write_text(json.dumps(payload, indent=2) + "\n")
    tmp_path.replace(RESULTS)


if __name__ == "__main__":
    main()
