"""Embedding throughput: bare ``SentenceTransformer.encode`` vs irflow's cached pipeline (cold cache).

Both encode the same SciFact documents (``(title + " " + text).strip()``) with all-MiniLM-L6-v2,
batch 32, normalised, in one process, alternating A B A B so drift (thermal, other load) hits
both alike. The pipeline run includes everything ``embed_texts`` does on a cold cache: model
identity, key, chunk plan, Parquet parts, ``_COMPLETE``. Model loading is timed separately
(both sides load once). Target: pipeline docs/s >= 0.95 x bare docs/s.

    python benchmarks/bench_embed.py [--docs 1000] [--rounds 2]

Writes ``benchmarks/results/embed.json`` (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
import zipfile
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import numpy as np  # noqa: E402

from irflow.tasks.core.atomic import write_json  # noqa: E402
from irflow.tasks.embed import cache as embed_cache  # noqa: E402
from irflow.tasks.embed import inference, models  # noqa: E402

SHARED = Path(os.environ.get("IRFLOW_SHARED_DIR") or ROOT.parent / "shared")


def scifact_documents(n: int) -> tuple[list[str], list[str]]:
    """The first ``n`` SciFact documents as (ids, embedded texts)."""
    with zipfile.ZipFile(SHARED / "datasets" / "beir" / "scifact.zip") as zf:
        lines = zf.read("scifact/corpus.jsonl").decode("utf-8").split("\n")
    docs = [json.loads(line) for line in lines if line][:n]
    return [str(d["_id"]) for d in docs], [(d["title"] + " " + d["text"]).strip() for d in docs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2, help="A B pairs (default 2: A B A B)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "embed.json")
    args = parser.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    ids, texts = scifact_documents(args.docs)
    load_start = round(os.getloadavg()[0], 2)  # other processes on the machine skew wall-clock rates
    model = models.resolve_model("minilm")

    start = time.perf_counter()
    bare_model = SentenceTransformer(model.path)
    load_bare = time.perf_counter() - start
    start = time.perf_counter()
    models.load_sentence_transformer(model.path)
    load_pipeline = time.perf_counter() - start
    for m in (bare_model, models.load_sentence_transformer(model.path)):  # warm-up: first-call allocations
        m.encode(texts[:32], batch_size=32, normalize_embeddings=True)

    def bare() -> np.ndarray:
        return bare_model.encode(texts, batch_size=32, normalize_embeddings=True)

    scratch = tempfile.TemporaryDirectory()
    inner = {"seconds": 0.0}
    model_encode = inference.encode

    def timed_encode(*a, **kw):  # the model call inside the pipeline: the rest is pipeline overhead
        start = time.perf_counter()
        try:
            return model_encode(*a, **kw)
        finally:
            inner["seconds"] += time.perf_counter() - start

    embed_cache.encode = timed_encode  # patched where the cache looks it up

    def pipeline() -> np.ndarray:
        os.environ["IRFLOW_CACHE_DIR"] = tempfile.mkdtemp(dir=scratch.name)  # cold cache every round
        result = embed_cache.embed_texts(ids, texts, model, role="document", batch_size=32)
        assert result.encoded == len(texts) and result.from_cache == 0
        return result.vectors

    rounds = []
    for r in range(args.rounds):
        for name, run in (("bare", bare), ("pipeline", pipeline)):
            inner["seconds"] = 0.0
            start, cpu = time.perf_counter(), time.process_time()
            vectors = run()
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
            row = {
                "round": r,
                "side": name,
                "seconds": round(seconds, 3),
                "cpu_seconds": round(cpu, 3),
                "docs_per_s": round(len(texts) / seconds, 2),
            }
            if name == "pipeline":
                row["overhead_seconds"] = round(seconds - inner["seconds"], 4)
            rounds.append(row)
            print(
                f"round {r} {name:8s} {seconds:7.2f} s  {len(texts) / seconds:6.2f} docs/s  cpu {cpu:7.2f} s"
                + (f"  overhead {row['overhead_seconds']:.3f} s" if name == "pipeline" else ""),
                flush=True,
            )
            if name == "bare":
                reference = vectors
            else:
                np.testing.assert_allclose(vectors, reference, atol=1e-5)

    def rate(side: str, clock: str = "seconds") -> float:
        total = sum(r[clock] for r in rounds if r["side"] == side)
        return len(texts) * args.rounds / total

    pipeline_total = sum(r["seconds"] for r in rounds if r["side"] == "pipeline")
    overhead = sum(r["overhead_seconds"] for r in rounds if r["side"] == "pipeline")

    scratch.cleanup()
    ratio = rate("pipeline") / rate("bare")
    result = {
        "benchmark": "embed throughput, bare SentenceTransformer.encode vs irflow embed_texts (cold cache)",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": model.name,
        "model_path": model.path,
        "texts": len(texts),
        "mean_chars": round(float(np.mean([len(t) for t in texts])), 1),
        "batch_size": 32,
        "chunk_size": embed_cache.CHUNK_SIZE,
        "rounds": rounds,
        "bare_docs_per_s": round(rate("bare"), 2),
        "pipeline_docs_per_s": round(rate("pipeline"), 2),
        "ratio": round(ratio, 4),
        "target_ratio": 0.95,
        "meets_target": ratio >= 0.95,
        "ratio_per_round": [
            round(p["seconds"] and b["seconds"] / p["seconds"], 4) for b, p in zip(rounds[::2], rounds[1::2])
        ],
        "ratio_cpu_time": round(rate("pipeline", "cpu_seconds") / rate("bare", "cpu_seconds"), 4),
        "pipeline_overhead_seconds": round(overhead, 4),
        "pipeline_overhead_fraction": round(overhead / pipeline_total, 6),
        "load_average_1m": {"start": load_start, "end": round(os.getloadavg()[0], 2)},
        "model_load_seconds": {"bare": round(load_bare, 3), "pipeline": round(load_pipeline, 3)},
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    write_json(args.output, result)
    print(
        f"bare {result['bare_docs_per_s']} docs/s, pipeline {result['pipeline_docs_per_s']} docs/s, "
        f"ratio {result['ratio']} (target >= 0.95; cpu-time ratio {result['ratio_cpu_time']}, "
        f"pipeline overhead {result['pipeline_overhead_fraction']:.4%} of its time) -> {args.output}"
    )


if __name__ == "__main__":
    main()
