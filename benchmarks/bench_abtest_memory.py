"""Peak memory of ``irflow abtest``'s reading and analysis on a 5M-row log: chunked (now) against whole (before).

For each log (``--logs ROWSxUSERS``: rows, users), each tree (this checkout, and ``--before``: a commit
read whole into a temporary folder by ``git archive``) runs ``read_ab_log`` + ``analyse`` (+ the sequential test
with ``--sequential``) in a fresh Python under ``/usr/bin/time -v``; its peak resident memory, wall and CPU time
are recorded, and the two trees' results are compared number by number (they must be equal exactly).

The log has the columns ``irflow abtest`` reads (user_id, arm, query, clicked, position, dwell, converted,
day): 1 user in 2 in the treatment, ~30 % of pages clicked. It is written once per (rows, users) under
``--cache``. With ``--sequential`` the default ``--before`` is 6aa3181, the last commit that held the
sequential test's days in memory (users × days), and the default output ``abtest_memory_sequential.json``.

    python benchmarks/bench_abtest_memory.py [--logs 1000000x5000 5000000x5000 5000000x555000] \\
        [--before 9475f32] [--sequential] [--output benchmarks/results/abtest_memory.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from irflow.tasks.core.atomic import write_json  # noqa: E402

BEFORE = "9475f32"  # the last commit that read an A/B log whole
BEFORE_SEQUENTIAL = "6aa3181"  # the last commit that held the sequential test's days in memory
RUN = """
import json, sys
import irflow
assert irflow.__file__.startswith(sys.argv[4]), irflow.__file__
from irflow.tasks.online.abtest import analyse
from irflow.tasks.online.abtest_log import read_ab_log
from irflow.tasks.online.abtest_sequential import sequential
log = read_ab_log(sys.argv[1], "user_id")
out = {"analysis": analyse(log)}
if sys.argv[3] == "1":
    a = out["analysis"]
    out["sequential"] = sequential(log, a["control"], a["treatment"], list(a["metrics"]))
json.dump(out, open(sys.argv[2], "w"), sort_keys=True)
"""


def write_log(path: Path, rows: int, users: int, seed: int = 0) -> Path:
    """A CSV A/B log of ``rows`` rows over ``users`` users (pyarrow's writer: a few seconds for 5M rows)."""
    import pyarrow as pa
    import pyarrow.csv as csv

    if path.is_file():
        return path
    rng = np.random.default_rng(seed)
    user = rng.integers(0, users, rows)
    clicked = rng.random(rows) < 0.3
    position = np.where(clicked, rng.geometric(0.5, rows), 0)
    table = pa.table(
        {
            "user_id": pa.array(np.char.add("u", user.astype(str))),
            "arm": pa.array(np.where(user % 2, "treatment", "control")),
            "query": pa.array(np.char.add("query ", rng.integers(0, 500, rows).astype(str))),
            "clicked": clicked.astype(np.int64),
            "position": pa.array(np.where(clicked, position.astype(str), "")),
            "dwell": np.where(clicked, rng.exponential(40.0, rows).round(1), 0.0),
            "converted": (clicked & (rng.random(rows) < 0.2)).astype(np.int64),
            "day": rng.integers(1, 8, rows),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    csv.write_csv(table, partial)
    partial.replace(path)
    return path


def measure(tree: Path, log: Path, out: Path, sequential: bool) -> dict[str, float]:
    """Peak RSS (MiB), wall and CPU seconds of one run in a fresh Python with ``tree`` first on its path (run in
    ``out``'s folder: ``python -c`` puts its working folder before ``PYTHONPATH``)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = ["/usr/bin/time", "-v", sys.executable, "-c", RUN, str(log), str(out), "1" if sequential else "0", str(tree)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=out.parent)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-3000:]}")

    def field(name: str) -> str:
        match = re.search(rf"{re.escape(name)}: (.+)", done.stderr)
        assert match, name
        return match[1].strip()

    minutes, seconds = field("Elapsed (wall clock) time (h:mm:ss or m:ss)").rsplit(":", 1)
    return {
        "peak_rss_mib": round(int(field("Maximum resident set size (kbytes)")) / 1024, 1),
        "wall_s": round(float(seconds) + 60 * float(minutes.split(":")[-1]), 1),
        "cpu_s": round(float(field("User time (seconds)")) + float(field("System time (seconds)")), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", nargs="+", default=["1000000x5000", "5000000x5000", "5000000x555000"])
    parser.add_argument(
        "--before", help=f"the commit to compare with (default {BEFORE}, {BEFORE_SEQUENTIAL} with --sequential)"
    )
    parser.add_argument("--sequential", action="store_true", help="also the day-by-day sequential test")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "irflow-bench-abtest"))
    parser.add_argument("--output", help="default benchmarks/results/abtest_memory[_sequential].json")
    args = parser.parse_args()
    args.before = args.before or (BEFORE_SEQUENTIAL if args.sequential else BEFORE)
    name = "abtest_memory_sequential.json" if args.sequential else "abtest_memory.json"
    args.output = args.output or str(ROOT / "benchmarks" / "results" / name)
    cache = Path(args.cache)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        before = Path(scratch) / "before"
        before.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "irflow"], capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
        for rows, users in (map(int, spec.split("x")) for spec in args.logs):
            log = write_log(cache / f"ab-{rows}-{users}.csv", rows, users)
            row: dict[str, object] = {"rows": rows, "users": users, "log_mib": round(log.stat().st_size / 2**20)}
            outputs = {}
            for name, tree in (("before", before), ("now", ROOT)):
                outputs[name] = Path(scratch) / f"{name}-{rows}-{users}.json"
                row[name] = measure(tree, log, outputs[name], args.sequential)
                print(rows, users, name, row[name], flush=True)
            row["equal"] = json.loads(outputs["before"].read_text()) == json.loads(outputs["now"].read_text())
            results.append(row)
    document = {
        "benchmark": "abtest_memory",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "before": args.before,
        "sequential": args.sequential,
        "results": results,
    }
    write_json(Path(args.output), document)
    print(json.dumps(document, indent=2))


if __name__ == "__main__":
    main()
