"""A real Chroma server in the loop vs FAISS (exact flat and HNSW) on a BEIR collection.

One ``chroma run`` on 127.0.0.1 (temporary folder, stopped by PID). The corpus and queries are
encoded once with all-MiniLM-L6-v2 into irflow's embedding cache (``--cache``, kept between runs:
the first run encodes for minutes on 2 cores). Then, with the same vectors:

* load       build time of each index from the cached vectors (Chroma: create the collection and
             push every vector over HTTP, median of ``--builds``), as documents/s
* quality    irflow's ``retrieve`` of ``dense:minilm`` (flat), ``dense(index=hnsw):minilm`` and
             ``dense(index=chroma):minilm``: nDCG@10 and its delta against flat, and each index's
             recall@10/@100 against exact search as irflow tracks it (``index_recall_at_*``)
* latency    one query vector at a time (no encoding: the index alone, HTTP included for Chroma),
             top 100, ``--latency-queries`` queries x ``--runs`` after 10 warm-up queries: p50/p95 ms

    python benchmarks/bench_chroma.py [--dataset nfcorpus] [--max-seq-length N] [--builds 3]

Writes ``benchmarks/results/chroma.json`` (atomically).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the test helper that starts and stops `chroma run`

import numpy as np  # noqa: E402
from _chroma import chroma_server  # noqa: E402

from irflow.tasks.core.atomic import write_json  # noqa: E402

SHARED = Path(os.environ.get("IRFLOW_SHARED_DIR") or ROOT.parent / "shared") / "datasets" / "beir"
DEPTH = 100
HNSW = {"M": 32, "efConstruction": 200, "efSearch": 128}  # irflow's FAISS HNSW defaults
INDEXES: dict[str, tuple[str, dict[str, int]]] = {  # name -> (index kind, its parameters in the spec)
    "flat": ("flat", {}),
    "hnsw": ("hnsw", {}),  # irflow's defaults: HNSW
    "chroma": ("chroma", {}),  # the server's defaults (M 16, efConstruction 100, efSearch 100)
    "chroma_as_hnsw": ("chroma", HNSW),  # the settings of the FAISS HNSW above
}


def _spec(kind: str, params: dict[str, int], max_seq_length: int | None) -> str:
    options = [f"max_seq_length={max_seq_length}"] if max_seq_length else []
    options += [f"index={kind}"] if kind != "flat" else []
    options += [f"{k}={v}" for k, v in params.items()]
    return f"dense({','.join(options)}):minilm" if options else "dense:minilm"


def _latency(index: Any, queries: np.ndarray, runs: int) -> dict[str, float]:
    for q in queries[:10]:
        index.search(q[None, :], DEPTH)
    samples = []
    for _ in range(runs):
        for q in queries:
            start = time.perf_counter()
            index.search(q[None, :], DEPTH)
            samples.append((time.perf_counter() - start) * 1000.0)
    p50, p95 = np.percentile(samples, [50, 95])
    return {"p50_ms": round(float(p50), 3), "p95_ms": round(float(p95), 3), "samples": len(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="nfcorpus", help="a BEIR zip in the shared folder")
    parser.add_argument("--max-seq-length", type=int, default=None)
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--latency-queries", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "irflow-bench-chroma-cache")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "chroma.json")
    args = parser.parse_args()
    os.environ["IRFLOW_CACHE_DIR"] = str(args.cache)

    from irflow.tasks.embed import vectors as embed
    from irflow.tasks.index.faiss_index import build_index
    from irflow.tasks.ingest import import_dataset, load_dataset
    from irflow.tasks.metrics import evaluate, mean
    from irflow.tasks.retrieve.searchers import retrieve
    from irflow.tasks.systems.specs import parse_system

    stored = f"bench-{args.dataset}"
    try:
        dataset = load_dataset(stored, "test")
    except KeyError:
        import_dataset(SHARED / f"{args.dataset}.zip", "beir", stored)
        dataset = load_dataset(stored, "test")
    systems = {name: _spec(kind, params, args.max_seq_length) for name, (kind, params) in INDEXES.items()}
    spec = parse_system(systems["flat"])
    start = time.perf_counter()
    docs, queries = embed.embed_corpus(dataset, spec), embed.embed_queries(dataset, spec)
    encode_seconds = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "chroma"
        db.mkdir()
        with chroma_server(db) as url:
            os.environ["IRFLOW_CHROMA_URL"] = url
            quality: dict[str, Any] = {}
            for name, system in systems.items():
                result = retrieve(dataset, system, DEPTH)
                ndcg = mean(evaluate(result.run, dataset.qrels, ["nDCG@10"]))["nDCG@10"]
                info = result.info
                exact = 1.0 if name == "flat" else None
                quality[name] = {
                    "system": system,
                    "ndcg_at_10": round(ndcg, 5),
                    "recall_at_10_vs_exact": round(info.get("index_recall_at_10", exact), 4),
                    "recall_at_100_vs_exact": round(info.get("index_recall_at_100", exact), 4),
                    "index_params": {k: v for k, v in info.items() if k.startswith("index_") and "recall" not in k},
                }
            for q in quality.values():
                q["ndcg_at_10_delta_vs_flat"] = round(q["ndcg_at_10"] - quality["flat"]["ndcg_at_10"], 5)

            n = len(docs.vectors)
            load: dict[str, Any] = {}
            latency: dict[str, Any] = {}
            picks = np.linspace(0, len(queries.vectors) - 1, args.latency_queries).round().astype(int)
            for name, (kind, params) in INDEXES.items():
                seconds = []
                builds = args.builds if kind != "flat" else 1
                for build in range(builds):
                    index = build_index(docs.vectors, kind, params)  # no cache_dir: every build is timed
                    seconds.append(index.build_seconds)
                    if kind == "chroma" and build < builds - 1:
                        index.close()
                median = statistics.median(seconds)
                load[name] = {"build_seconds": round(median, 4), "documents_per_second": round(n / median, 1)}
                latency[name] = _latency(index, queries.vectors[picks], args.runs)
                if kind == "chroma":
                    index.close()

    document = {
        "benchmark": "chroma",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/bench_chroma.py " + " ".join(sys.argv[1:]),
        "dataset": {"name": f"beir/{args.dataset}", "split": "test", "documents": n, "queries": len(queries.vectors)},
        "model": "all-MiniLM-L6-v2",
        "max_seq_length": args.max_seq_length or "model default",
        "encode_seconds_this_run": round(encode_seconds, 2),
        "depth": DEPTH,
        "quality": quality,
        "load": load,
        "latency_single_query": latency,
        "versions": {p: metadata.version(p) for p in ("chromadb", "faiss-cpu", "numpy")},
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
    }
    write_json(args.output, document)
    print(f"wrote {args.output}")
    for kind, q in quality.items():
        print(
            f"{kind:15s} nDCG@10 {q['ndcg_at_10']:.4f} (delta {q['ndcg_at_10_delta_vs_flat']:+.4f})"
            f"  recall@10/100 {q['recall_at_10_vs_exact']}/{q['recall_at_100_vs_exact']}"
            f"  load {load[kind]['documents_per_second']:.0f} docs/s"
            f"  p50/p95 {latency[kind]['p50_ms']}/{latency[kind]['p95_ms']} ms"
        )


if __name__ == "__main__":
    main()
