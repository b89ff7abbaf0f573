"""The library's front door: how long ``import irflow`` and one ``irflow.evaluate`` take in a fresh process,
and whether its numbers equal ``irflow run``'s metrics.json.

Each figure is the median of ``--rounds`` fresh interpreters (interpreter start included), on a warm cache
(the demo dataset ingested and its BM25 index built once, unmeasured). The equality check runs
``irflow run --no-track --latency-runs 0`` once and compares every mean with the library's, and the
library's in-memory runs with pytrec_eval (when installed). Goals (issue 34): ``import irflow`` <= 0.5 s,
``irflow.evaluate("techdocs", ["bm25"])`` <= 3 s, differences <= 1e-12.

    python benchmarks/bench_library.py [--rounds 5]

Uses a temporary cache; writes ``benchmarks/results/library.json`` (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "library.json"
SYSTEMS = ["bm25", "bm25:k1=1.2,b=0.75"]
METRICS = ["nDCG@10", "nDCG@100", "R@100", "P@10", "RR@10", "AP@100"]

IMPORT = "import irflow"
EVALUATE = "import irflow; irflow.evaluate('techdocs', ['bm25'])"


def fresh(code: str, env: dict[str, str]) -> float:
    """Wall seconds of ``python -c code`` in a new interpreter."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=600)
    return time.perf_counter() - start


def equality(env: dict[str, str], folder: Path) -> dict[str, float]:
    """The largest |library − irflow run| over every mean, and |in-memory − pytrec_eval| over every value."""
    args = [sys.executable, "-m", "irflow.cli", "run", "--no-track", "--latency-runs", "0", "--output", str(folder)]
    for system in SYSTEMS:
        args += ["--system", system]
    for metric in METRICS:
        args += ["--metric", metric]
    subprocess.run(args, env=env, check=True, capture_output=True, timeout=900)
    code = f"""
import json, irflow
ev = irflow.evaluate("techdocs", {SYSTEMS!r}, metrics={METRICS!r})
doc = json.load(open({str(folder / "metrics.json")!r}))
cli = max(
    abs(ev.means.loc[label, m] - doc["systems"][spec][m]) for label, spec in ev.systems.items() for m in {METRICS!r}
)
pytrec = None
try:
    import pytrec_eval
    qrels = irflow.load_dataset("techdocs").qrels
    q = {{k: dict(zip(g.doc_id, g.relevance.astype(int))) for k, g in qrels.groupby("query_id")}}
    runs = {{label: {{k: dict(zip(g.doc_id, g.score.astype(float))) for k, g in run.groupby("query_id")}}
            for label, run in ev.runs.items()}}
    mem = irflow.evaluate(qrels=q, systems=runs, metrics=["nDCG@10", "P@10", "AP@100", "R@100"])
    names = {{"nDCG@10": "ndcg_cut_10", "P@10": "P_10", "AP@100": "map_cut_100", "R@100": "recall_100"}}
    ev_ = pytrec_eval.RelevanceEvaluator(q, set(names.values()))
    diffs = []
    for label, run in runs.items():
        got = ev_.evaluate(run)
        table = mem.per_query[mem.per_query.system == label]
        for row in table.itertuples():
            diffs.append(abs(row.value - got[row.query_id][names[row.metric]]))
    pytrec = max(diffs)
except ImportError:
    pass
print(json.dumps({{"cli": float(cli), "pytrec_eval": pytrec}}))
"""
    done = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    found = json.loads(done.stdout)
    return {"max_abs_diff_vs_irflow_run": found["cli"], "max_abs_diff_in_memory_vs_pytrec_eval": found["pytrec_eval"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="irflow-bench-library-") as tmp:
        env = {
            **os.environ,
            "IRFLOW_CACHE_DIR": str(Path(tmp) / "cache"),
            "PREFECT_HOME": str(Path(tmp) / "prefect"),
            "HF_HUB_OFFLINE": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1",
        }
        fresh(EVALUATE, env)  # warm: the dataset ingested, the BM25 index built (unmeasured)
        imports = [fresh(IMPORT, env) for _ in range(args.rounds)]
        calls = [fresh(EVALUATE, env) for _ in range(args.rounds)]
        checks = equality(env, Path(tmp) / "run")
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "rounds": args.rounds,
        "import_irflow_s": {"median": statistics.median(imports), "all": imports, "goal": 0.5},
        "evaluate_techdocs_bm25_s": {"median": statistics.median(calls), "all": calls, "goal": 3.0},
        **checks,
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    tmp_file = RESULT.with_suffix(".json.tmp")
    tmp_file.write_text(json.dumps(result, indent=2) + "\n")
    tmp_file.replace(RESULT)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
