"""How fast each ``irflow`` command rejects a bad argument: a fresh process per try, the median of 3.

Each case is a command line with one mistake (a misspelt dataset, system or arm, a missing file, a log
without its unit column, a folder that is no result); the command must exit 2 with the named error, before
Prefect, a model or a corpus. Goal: at most 3 s each (issue 36). Writes ``benchmarks/results/cli_checks.json``.

    python benchmarks/bench_cli_checks.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 3.0


def cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments, a fragment the error line must hold)."""
    log = tmp / "ab.csv"
    log.write_text("user_id,arm,query,clicked\nu1,control,q,1\nu2,treatment,q,0\n", encoding="utf-8")
    no_unit = tmp / "no_unit.csv"
    no_unit.write_text("arm,query,clicked\ncontrol,q,1\n", encoding="utf-8")
    queries = tmp / "queries.csv"
    queries.write_text("query\nhow to install\n", encoding="utf-8")
    sheet = tmp / "sheet.tsv"
    sheet.write_text("query_id\tdoc_id\tgrade\nq1\td1\t1\n", encoding="utf-8")
    suite = tmp / "suite.yaml"
    suite.write_text("name: s\ndatasets: [techdoc]\nsystems: [bm25]\n", encoding="utf-8")
    missing = str(tmp / "missing.jsonl")
    return {
        "datasets download": (["datasets", "download", "beir/scifakt"], "did you mean"),
        "datasets info": (["datasets", "info", "techdoc"], "did you mean"),
        "datasets import": (["datasets", "import", missing, "--format", "jsonl", "--name", "x"], "no such file"),
        "datasets synthesize": (
            ["datasets", "synthesize", "--dataset", "techdocs", "--name", "s", "--llm", "nope:x"],
            "--llm",
        ),
        "run": (["run", "--system", "bm52"], "did you mean 'bm25'"),
        "report": (["report", str(tmp / "no-result")], "no such folder"),
        "compare": (["compare", str(tmp / "no-result")], "no such folder"),
        "suite": (["suite", str(suite)], "did you mean"),
        "nightly": (["nightly", str(tmp / "missing.yaml")], "no such file"),
        "annotate": (["annotate", "--dataset", "techdoc", "--no-track"], "did you mean"),
        "pool": (["pool", "--dataset", "techdocs", "--system", "bm52", "--output", str(tmp / "pool")], "bm25"),
        "agreement": (["agreement", str(sheet), missing], "no such file"),
        "drift": (["drift", "--dataset", "techdocs", "--current", missing], "no such file"),
        "abtest (no unit column)": (["abtest", str(no_unit), "--no-track"], "--unit"),
        "abtest (--control no arm)": (["abtest", str(log), "--control", "contrl", "--no-track"], "did you mean"),
        "interleave": (["interleave", "--dataset", "techdocs", "--system", "bm25", "--system", "bm52"], "bm25"),
        "power": (["power", str(tmp / "no-result")], "no such folder"),
        "rag (missing --answers)": (["rag", "--answers", missing, "--no-track"], "no such file"),
        "rag (--generator kind)": (["rag", "--generator", "opnai:gpt-4o-mini", "--no-track"], "did you mean"),
        "rag (--human a dataset)": (["rag", "--human", "techdocs", "--no-track"], "--human"),
        "run (--human unknown)": (["run", "--human", "techdoc", "--no-track"], "did you mean"),
    }


def once(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "irflow.cli", *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    return time.perf_counter() - start, done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "cli_checks.json"))
    options = parser.parse_args()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    rows = {}
    with tempfile.TemporaryDirectory(prefix="irflow-bench-checks-") as folder:
        env["IRFLOW_CACHE_DIR"] = env.get("IRFLOW_CACHE_DIR") or str(Path(folder) / "cache")
        for name, (args, fragment) in cases(Path(folder)).items():
            times, last = [], None
            for _ in range(options.repeats):
                seconds, last = once(args, env)
                times.append(seconds)
            assert last is not None
            error = last.stderr.strip().splitlines()[-1] if last.stderr.strip() else ""
            ok = last.returncode == 2 and fragment in last.stderr and "Beginning flow run" not in last.stderr
            rows[name] = {
                "args": args[:1] + [a if "irflow-bench" not in a else Path(a).name for a in args[1:]],
                "exit": last.returncode,
                "error": error[:300],
                "named_error": ok,
                "median_s": round(statistics.median(times), 3),
                "times_s": [round(t, 3) for t in times],
                "within_goal": statistics.median(times) <= GOAL_S,
            }
            verdict = "ok" if ok else "WRONG"
            print(f"{name:<28} exit {last.returncode}  {statistics.median(times):5.2f} s  {verdict}  {error[:90]}")
    document = {
        "goal_s": GOAL_S,
        "repeats": options.repeats,
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "cases": rows,
    }
    Path(options.output).parent.mkdir(parents=True, exist_ok=True)
    Path(options.output).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return 0 if all(r["named_error"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
