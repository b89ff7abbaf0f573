"""Ingestion speed and peak memory: SciFact, NFCorpus, and a synthetic 1M-passage MS MARCO file.

Each ingestion runs in its own child process so its peak RSS is its own; a child that only
imports the same modules gives the baseline. For MS MARCO the figure to compare is the size the
passages would take held as Python strings (what a dict-of-strings loader would need at least).

    python benchmarks/bench_ingest.py [--passages 1000000]

Writes benchmarks/results/ingest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("IRFLOW_SHARED_DIR") or ROOT.parent / "shared") / "datasets" / "beir"
CHILD = """
import json, resource, sys, time
from irflow.tasks.ingest import import_dataset
args = json.loads(sys.argv[1])
start = time.perf_counter()
d = None if args["path"] is None else import_dataset(
    args["path"], args["format"], args["name"], split=args.get("split")
)
elapsed = time.perf_counter() - start
print(json.dumps({"seconds": elapsed, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "documents": None if d is None else d["documents"]}))
"""


def run_child(cache: Path, **args: object) -> dict:
    env = {**os.environ, "IRFLOW_CACHE_DIR": str(cache)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def synthetic_msmarco(folder: Path, passages: int, seed: int = 13) -> int:
    """Write collection.tsv with ``passages`` lines of ~55 words; return the bytes of passage text."""
    rng = random.Random(seed)
    vocab = [
        f"{rng.choice('bcdfghjklmnpqrstvwz')}{rng.choice('aeiou')}{rng.choice('lmnrst')}{i % 997}" for i in range(20000)
    ]
    total = 0
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "collection.tsv", "w", encoding="utf-8") as fh:
        for pid in range(passages):
            text = " ".join(rng.choices(vocab, k=rng.randint(35, 75)))
            total += len(text)
            fh.write(f"{pid}\t{text}\n")
    with open(folder / "queries.dev.tsv", "w") as fh:
        for qid in range(1000):
            fh.write(f"{qid}\tquery {qid} {' '.join(rng.choices(vocab, k=6))}\n")
    with open(folder / "qrels.dev.tsv", "w") as fh:
        for qid in range(1000):
            fh.write(f"{qid}\t0\t{rng.randrange(passages)}\t1\n")
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=1_000_000)
    args = parser.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        baseline = run_child(tmp_path / "c0", path=None)
        results["baseline_imports"] = {"peak_rss_mb": round(baseline["peak_rss_mb"], 1)}
        for name in ("scifact", "nfcorpus"):
            r = run_child(tmp_path / f"c-{name}", path=str(SHARED / f"{name}.zip"), format="beir", name=name)
            results[name] = {
                "documents": r["documents"],
                "seconds": round(r["seconds"], 2),
                "documents_per_s": round(r["documents"] / r["seconds"]),
                "peak_rss_mb": round(r["peak_rss_mb"], 1),
            }
            print(name, results[name], flush=True)
        start = time.perf_counter()
        text_bytes = synthetic_msmarco(tmp_path / "msmarco", args.passages)
        gen = time.perf_counter() - start
        r = run_child(tmp_path / "c-mm", path=str(tmp_path / "msmarco"), format="msmarco", name="mm", split="dev")
        # A Python str of n ASCII characters takes 49 + n bytes (CPython 3.11); ids are strings too.
        as_python = text_bytes + args.passages * (49 + 49 + 7)
        results["msmarco_synthetic"] = {
            "passages": args.passages,
            "file_mb": round((tmp_path / "msmarco" / "collection.tsv").stat().st_size / 2**20, 1),
            "seconds": round(r["seconds"], 2),
            "passages_per_s": round(args.passages / r["seconds"]),
            "peak_rss_mb": round(r["peak_rss_mb"], 1),
            "peak_above_baseline_mb": round(r["peak_rss_mb"] - baseline["peak_rss_mb"], 1),
            "text_as_python_strings_mb": round(as_python / 2**20, 1),
            "generate_seconds": round(gen, 1),
        }
        print("msmarco", results["msmarco_synthetic"], flush=True)
    out = ROOT / "benchmarks" / "results" / "ingest.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    from irflow.tasks.core.atomic import write_json

    write_json(out, {"python": sys.version.split()[0], "cpus": os.cpu_count(), "results": results})
    print("wrote", out)


if __name__ == "__main__":
    main()
