"""Where the test suite's time goes: every test's CPU seconds (its process and its children), the 20 most
expensive, and the suite's totals, measured by running ``pytest`` as the README runs it.

    python benchmarks/profile_tests.py [--rows FILE] [-- PYTEST_ARGS...]

Runs ``pytest`` (the project's ``addopts``: a worker per core) with ``benchmarks/cpu_profile_plugin.py`` loaded,
under ``/usr/bin/time``-like accounting of the whole run (wall, and user+sys of every process), and writes
``benchmarks/results/test_profile.json`` (atomically): ``wall_s``, ``cpu_s``, ``tests``, ``top`` (the 20
tests with the most CPU seconds, with their wall seconds), ``by_file`` (CPU seconds per test file) and
``by_file_wall`` (a worker's seconds per test file: ``tests/conftest.py`` runs the longest files first) and
``waiting`` (the 20 tests whose wall seconds exceed their CPU seconds the most: a worker idles through them) and
``workers`` (each xdist worker's seconds in tests and when it ran out of work: the gap between the first and the
last worker to finish is the tail that longest-first ordering is meant to keep short). ``--rows FILE`` keeps every
test's row (JSON lines) for a closer look.
Goals (issue 38): ``pytest`` <= 600 s wall and <= 1,200 s CPU on a quiet 2-core machine.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "test_profile.json"
TOP = 20


def main(args: list[str]) -> int:
    keep: Path | None = None
    if args[:1] == ["--rows"] and len(args) >= 2:
        keep, args = Path(args[1]).resolve(), args[2:]
        if args[:1] == ["--"]:
            args = args[1:]
    with tempfile.TemporaryDirectory(prefix="irflow-test-profile-") as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        env = {
            **os.environ,
            "IRFLOW_TEST_PROFILE": str(rows_file),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")])),
        }
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start, started_at = time.perf_counter(), time.time()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "cpu_profile_plugin", "-p", "no:cacheprovider", *args],
            cwd=ROOT,
            env=env,
            check=False,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        lines = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
        rows = [line for line in lines if "test" in line]
        events = [line for line in lines if "event" in line]
        if keep is not None and rows_file.exists():
            keep.write_bytes(rows_file.read_bytes())
    by_file: dict[str, float] = defaultdict(float)
    by_file_wall: dict[str, float] = defaultdict(float)
    for row in rows:
        by_file[row["test"].split("::")[0]] += row["cpu_s"]
        by_file_wall[row["test"].split("::")[0]] += row["wall_s"]
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()},
        "pytest_exit_code": done.returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
        "tests": len(rows),
        "goal": {"wall_s": 600, "cpu_s": 1200},
        "top": sorted(rows, key=lambda r: -r["cpu_s"])[:TOP],
        "waiting": sorted(rows, key=lambda r: r["cpu_s"] - r["wall_s"])[:TOP],
        "by_file": _descending(by_file),
        "by_file_wall": _descending(by_file_wall),
        "workers": _workers(rows, events, started_at),
    }
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    partial = RESULT.with_suffix(".json.tmp")
    partial.write_text(json.dumps(result, indent=2) + "\n")
    partial.replace(RESULT)
    print(json.dumps({k: result[k] for k in ("wall_s", "cpu_s", "tests", "pytest_exit_code", "workers")}))
    for row in result["top"]:
        print(f"{row['cpu_s']:8.1f} s CPU {row['wall_s']:8.1f} s wall  {row['test']}")
    return 0 if done.returncode == 0 else 1


def _workers(
    rows: list[dict[str, Any]], events: list[dict[str, Any]], started_at: float
) -> dict[str, dict[str, float]]:
    """Per process (xdist worker, or ``main``): its seconds in tests, and when (seconds after pytest started) it
    finished its last test, finished its session and exited (every exit handler run)."""
    workers: dict[str, dict[str, float]] = {}
    for row in rows:
        worker = workers.setdefault(str(row.get("worker", "main")), {"tests_s": 0.0})
        worker["tests_s"] += float(row["wall_s"])
        if "end" in row:
            worker["finished_s"] = max(worker.get("finished_s", 0.0), float(row["end"]) - started_at)
    for event in events:
        worker = workers.setdefault(str(event["worker"]), {"tests_s": 0.0})
        worker[f"{event['event']}_s"] = float(event["end"]) - started_at
    return {name: {k: round(v, 1) for k, v in w.items()} for name, w in sorted(workers.items())}


def _descending(seconds: dict[str, float]) -> dict[str, float]:
    return dict(sorted(((f, round(s, 1)) for f, s in seconds.items()), key=lambda kv: -kv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if sys.argv[1:2] != ["--"] else sys.argv[2:]))
