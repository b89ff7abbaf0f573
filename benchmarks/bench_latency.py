"""Is irflow's measured latency the system's own? irflow's latency stage against bare library calls on the
same queries, and two identical runs against each other.

Run: python benchmarks/bench_latency.py [--rounds 5] [--depth 100] [--skip-scifact]

BM25 (techdocs, and SciFact test when the shared BEIR zip is present): irflow's ``measure_latency``
of ``bm25`` against a bare bm25s engine built from the same tokens and answering each query with
``bm25s.tokenize([query], stopwords="en", stemmer=...)`` + ``retrieve(tokens, k=depth)``, its
tokenisation included. Dense (techdocs, all-MiniLM-L6-v2): irflow's ``dense:minilm`` against a bare
``SentenceTransformer.encode([query], normalize_embeddings=True)`` + ``faiss.IndexFlatIP.search`` over
the same corpus vectors. Every query of the split is timed, one at a time, after a warm-up, with
one thread for both (``tasks.retrieve.latency.pinned_threads``). irflow and bare alternate, ``--rounds``
times (one repeat each per round), so machine load hits both alike; reported: p50 of all samples
of each, their ratio (target ≤ 1.1) and the load average before and after.

Repeatability: two identical ``measure_latency`` runs (3 repeats each); they agree when each run's
p50 (p95) lies within the other's 95 % bootstrap interval (``p50_ms_ci_low``…``_high``); whether it
also lies within the other's min–max over repeats, and whether the two min–max ranges overlap, are
reported too. The load average before and after each measurement says how busy the machine was:
on a shared machine whose load moves between runs, runs can differ by more than either's spread.

Writes ``benchmarks/results/latency.json`` (atomically) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("IRFLOW_SHARED_DIR") or ROOT.parent / "shared") / "datasets" / "beir"

from irflow.tasks.core.atomic import write_json  # noqa: E402
from irflow.tasks.retrieve import latency  # noqa: E402
from irflow.tasks.retrieve.searchers import measure_latency  # noqa: E402


def bare_bm25(dataset: Any) -> Callable[[str, int], Any]:
    """bm25s used directly, as its README shows: the same tokenizer settings as irflow's ``bm25``."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    corpus = (dataset.corpus["title"].fillna("") + " " + dataset.corpus["text"].fillna("")).tolist()
    engine = bm25s.BM25(k1=0.9, b=0.4)  # irflow's defaults (bm25s's default method, lucene)
    engine.index(bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)

    def search(text: str, depth: int) -> Any:
        tokens = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False)
        return engine.retrieve(tokens, k=min(depth, len(corpus)), show_progress=False)

    return search


def bare_dense(dataset: Any) -> Callable[[str, int], Any]:
    """SentenceTransformer.encode + a flat inner-product FAISS index, used directly."""
    import faiss
    from sentence_transformers import SentenceTransformer

    from irflow.tasks.embed.models import resolve_model
    from irflow.tasks.embed.vectors import document_texts

    model = SentenceTransformer(resolve_model("minilm").path, device="cpu")
    vectors = model.encode(document_texts(dataset.corpus), normalize_embeddings=True, convert_to_numpy=True)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(text: str, depth: int) -> Any:
        query = model.encode([text], normalize_embeddings=True, convert_to_numpy=True)
        return index.search(query, min(depth, index.ntotal))

    return search


def time_bare(search: Callable[[str, int], Any], texts: list[str], depth: int, warmup: int = 10) -> list[float]:
    """Seconds per query of a bare call, timed like irflow's (same loop, clock cost subtracted)."""
    for text in texts[:warmup]:
        search(text, depth)
    overhead = latency.clock_overhead()
    return latency.time_calls([lambda t=t: search(t, depth) for t in texts], overhead)


def compare(dataset: Any, system: str, bare: Callable[[str, int], Any], rounds: int, depth: int) -> dict[str, Any]:
    texts = dataset.queries["text"].fillna("").astype(str).tolist()
    ours: list[float] = []
    theirs: list[float] = []
    load_before = latency.load_average()
    with latency.pinned_threads(latency.DEFAULT_THREADS):
        for _ in range(rounds):
            report = measure_latency(dataset, system, depth=depth, num_runs=1, sample=None, warmup=10)
            ours += [x / 1000.0 for x in report.samples_ms]
            theirs += time_bare(bare, texts, depth)
    load_after = latency.load_average()
    p50_ours, p50_bare = float(np.median(ours)) * 1000, float(np.median(theirs)) * 1000
    return {
        "system": system,
        "queries": len(texts),
        "rounds": rounds,
        "depth": depth,
        "irflow_p50_ms": round(p50_ours, 4),
        "bare_p50_ms": round(p50_bare, 4),
        "ratio": round(p50_ours / p50_bare, 3),
        "irflow_p95_ms": round(float(np.percentile(ours, 95)) * 1000, 4),
        "bare_p95_ms": round(float(np.percentile(theirs, 95)) * 1000, 4),
        "load_before": load_before,
        "load_after": load_after,
    }


def repeatability(dataset: Any, system: str, depth: int) -> dict[str, Any]:
    """Two identical runs: does each run's p50 and p95 lie within the other's reported interval?"""
    runs = [measure_latency(dataset, system, depth=depth, num_runs=3, sample=None, warmup=10) for _ in range(2)]
    fields = [f"{p}_ms{s}" for p in ("p50", "p95") for s in ("", "_min", "_max", "_ci_low", "_ci_high")]
    records = [{f: getattr(r, f) for f in [*fields, "load_before", "load_after"]} for r in runs]
    a, b = records

    def within(p: str, lo: str, hi: str) -> bool:
        return bool(a[lo] <= b[f"{p}_ms"] <= a[hi] and b[lo] <= a[f"{p}_ms"] <= b[hi])

    return {
        "system": system,
        "runs": records,
        "p50_within_each_others_ci": within("p50", "p50_ms_ci_low", "p50_ms_ci_high"),
        "p95_within_each_others_ci": within("p95", "p95_ms_ci_low", "p95_ms_ci_high"),
        "p50_within_each_others_repeat_range": within("p50", "p50_ms_min", "p50_ms_max"),
        "p50_repeat_ranges_overlap": bool(
            max(a["p50_ms_min"], b["p50_ms_min"]) <= min(a["p50_ms_max"], b["p50_ms_max"])
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--skip-scifact", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "threads": latency.DEFAULT_THREADS,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["IRFLOW_CACHE_DIR"] = str(Path(tmp) / "cache")
        from irflow.tasks.ingest import import_dataset, load_dataset

        techdocs = load_dataset("techdocs")
        results["techdocs_bm25"] = compare(techdocs, "bm25", bare_bm25(techdocs), args.rounds, args.depth)
        results["techdocs_bm25_repeatability"] = repeatability(techdocs, "bm25", args.depth)
        if not args.skip_scifact and (SHARED / "scifact.zip").is_file():
            import_dataset(SHARED / "scifact.zip", "beir", "bench-scifact")
            scifact = load_dataset("bench-scifact", "test")
            results["scifact_bm25"] = compare(scifact, "bm25", bare_bm25(scifact), args.rounds, args.depth)
            results["scifact_bm25_repeatability"] = repeatability(scifact, "bm25", args.depth)
        results["techdocs_dense"] = compare(techdocs, "dense:minilm", bare_dense(techdocs), args.rounds, args.depth)
        results["techdocs_dense_repeatability"] = repeatability(techdocs, "dense:minilm", args.depth)
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_json(ROOT / "benchmarks" / "results" / "latency.json", results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
