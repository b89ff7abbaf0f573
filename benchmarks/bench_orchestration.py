"""Orchestration overhead: ``irflow run`` wall time minus the same stages called as plain functions.

Both sides run as fresh processes (interpreter start and imports included) on warm caches (dataset,
embeddings and BM25 index are built once beforehand; Prefect's database is created by one unmeasured
``irflow run``, as it is once per machine for a user), alternating A B A B so drift hits both alike.
The plain side calls the stage functions the flow composes — ingest, embed, retrieve,
latency, metrics, significance, report, MLflow logging — in one script; the orchestrated side is
``irflow run`` with a temporary Prefect server (the default: started in the background as the
command begins, see ``irflow/flows/prefect_api.py``) and, with ``--server``, against a running
``prefect server start`` (``PREFECT_API_URL``), which removes the server start-up from every run.
Goal: overhead under 10 s and under 15 % of the plain time.

    python benchmarks/bench_orchestration.py [--datasets techdocs beir/scifact] [--rounds 2] [--server]

Uses the default cache (``IRFLOW_CACHE_DIR`` or datasets/cache; SciFact is imported from
../shared when not there yet); MLflow logs and Prefect state go to a temporary folder. Writes
``benchmarks/results/orchestration.json`` (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SHARED = Path(os.environ.get("IRFLOW_SHARED_DIR") or ROOT.parent / "shared")
QUIET = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "HF_HUB_OFFLINE": "1",
}


def plain(dataset: str, systems: list[str], metrics: list[str], latency_runs: int, output: str) -> dict[str, float]:
    """The evaluate flow's stages as plain calls, in the flow's order; returns seconds per stage."""
    times: dict[str, float] = {}

    def timed(name: str, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        value = fn(*args, **kwargs)
        times[name] = times.get(name, 0.0) + time.perf_counter() - start
        return value

    from irflow.tasks.embed import sharding
    from irflow.tasks.ingest import load_dataset
    from irflow.tasks.metrics import evaluate, mean, parse_measures
    from irflow.tasks.report import write as report
    from irflow.tasks.retrieve.searchers import measure_latency, retrieve
    from irflow.tasks.systems.specs import as_spec
    from irflow.tasks.tracking import log as tracking

    specs = [str(as_spec(s)) for s in systems]
    measures = [m.name for m in parse_measures(metrics)]
    data = timed("ingest", load_dataset, dataset)
    for job in timed("embed", sharding.embed_jobs, data, specs):
        timed("embed", sharding.encode_job, data, job)
    evaluations, infos = [], {}
    for system in specs:
        result = timed("retrieve", retrieve, data, system, 100)
        infos[system] = result.info
        cost = {}
        if latency_runs:
            latency = timed("latency", measure_latency, data, system, depth=100, num_runs=latency_runs)
            cost = {k: v for k, v in vars(latency).items() if k not in ("system", "info")}
        per_query = timed("metrics", evaluate, result.run, data.qrels, measures)
        evaluations.append(
            report.SystemEvaluation(
                system,
                result.run,
                per_query,
                mean(per_query),
                {"retrieve_seconds": result.search_seconds, "prepare_seconds": result.prepare_seconds, **cost},
            )
        )
    comparisons = timed(
        "significance", report.significance_table, report.per_query_table(evaluations), measures, specs[0]
    )
    timed(
        "report",
        report.write_outputs,
        output,
        data,
        evaluations,
        measures,
        100,
        baseline=specs[0],
        comparisons=comparisons,
    )
    timed("track", tracking.log_evaluation, tracking.Tracker("bench"), output, infos=infos)
    return times


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _timed_process(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=7200)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def ensure_dataset(name: str) -> None:
    """Ingest the dataset once (BEIR zips from ../shared when IRFLOW_BEIR_BASE_URL is unset)."""
    from irflow.tasks.ingest import load_dataset

    try:
        load_dataset(name)
    except Exception:
        if not name.startswith("beir/"):
            raise
        os.environ.setdefault("IRFLOW_BEIR_BASE_URL", (SHARED / "datasets" / "beir").as_uri())
        load_dataset(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["techdocs", "beir/scifact"])
    parser.add_argument("--systems", nargs="+", default=["bm25", "dense:minilm", "hybrid:bm25+dense:minilm"])
    parser.add_argument(
        "--metrics",
        nargs="+",
        default=["nDCG@10", "nDCG@100", "R@10", "R@100", "P@10", "RR@10", "AP@100", "Success@10", "Rprec"],
    )
    parser.add_argument("--latency-runs", type=int, default=3, help="as irflow run (default 3)")
    parser.add_argument("--rounds", type=int, default=2, help="A B pairs per dataset (default 2)")
    parser.add_argument("--server", action="store_true", help="also time irflow run against a running Prefect server")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "orchestration.json")
    parser.add_argument("--plain", metavar="DATASET", help=argparse.SUPPRESS)  # the plain side, in its own process
    parser.add_argument("--out-dir", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.plain:
        print(json.dumps(plain(args.plain, args.systems, args.metrics, args.latency_runs, args.out_dir)))
        import gc

        gc.freeze()  # exit as the irflow command does (flows.cli.entry_point), so both sides end alike
        return

    work = Path(tempfile.mkdtemp(prefix="irflow-bench-orch-"))
    env = {
        **os.environ,
        **QUIET,
        "PREFECT_HOME": str(work / "prefect"),
        "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlruns' / 'mlflow.db'}",
    }
    env.pop("PREFECT_API_URL", None)
    os.environ.update({k: v for k, v in env.items() if k in QUIET or k == "MLFLOW_TRACKING_URI"})
    server = None
    if args.server:
        port = _free_port()
        server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "prefect"),
                "server",
                "start",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        api = f"http://127.0.0.1:{port}/api"
        for _ in range(180):
            try:
                if urllib.request.urlopen(f"{api}/health", timeout=2).read() == b"true":
                    break
            except OSError:
                time.sleep(1)
    results = {}
    try:
        for dataset in args.datasets:
            ensure_dataset(dataset)
            common = [
                *[a for s in args.systems for a in ("--system", s)],
                *[a for m in args.metrics for a in ("--metric", m)],
                "--latency-runs",
                str(args.latency_runs),
            ]
            plain_cmd = [
                sys.executable,
                __file__,
                "--plain",
                dataset,
                "--systems",
                *args.systems,
                "--metrics",
                *args.metrics,
                "--latency-runs",
                str(args.latency_runs),
                "--out-dir",
                str(work / "plain"),
            ]
            irflow_cmd = [
                sys.executable,
                "-m",
                "irflow.cli",
                "run",
                "--dataset",
                dataset,
                *common,
                "--output",
                str(work / "irflow"),
            ]
            _timed_process(plain_cmd, env)  # warm-up: builds every cache both sides read
            _timed_process(irflow_cmd, env)  # warm-up: creates Prefect's database (once per PREFECT_HOME)
            sides: dict[str, list[float]] = {"plain": [], "irflow": [], "irflow_server": []}
            stages: list[dict[str, float]] = []
            load = [round(os.getloadavg()[0], 2)]
            for _ in range(args.rounds):
                seconds, out = _timed_process(plain_cmd, env)
                sides["plain"].append(seconds)
                stages.append(json.loads(out.strip().splitlines()[-1]))
                sides["irflow"].append(_timed_process(irflow_cmd, env)[0])
                if server is not None:
                    sides["irflow_server"].append(_timed_process(irflow_cmd, {**env, "PREFECT_API_URL": api})[0])
            load.append(round(os.getloadavg()[0], 2))
            base = statistics.median(sides["plain"])
            entry = {
                "plain_seconds": sides["plain"],
                "irflow_seconds": sides["irflow"],
                "plain_stage_seconds": {k: round(statistics.median(s[k] for s in stages), 3) for k in stages[0]},
                "load_average_1m": load,
            }
            for side in ("irflow", "irflow_server"):
                if sides[side]:
                    overhead = statistics.median(sides[side]) - base
                    entry[f"{side}_overhead_seconds"] = round(overhead, 2)
                    entry[f"{side}_overhead_fraction"] = round(overhead / base, 4)
                    entry[f"{side}_meets_goal"] = overhead < 10 and overhead / base < 0.15
            if sides["irflow_server"]:
                entry["irflow_server_seconds"] = sides["irflow_server"]
            results[dataset] = entry
            print(dataset, json.dumps(entry, indent=2))
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)

    from irflow.tasks.core.atomic import write_json

    write_json(
        args.output,
        {
            "benchmark": "orchestration overhead: irflow run (Prefect + MLflow) minus the same stages as plain calls",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "systems": args.systems,
            "metrics": args.metrics,
            "latency_runs": args.latency_runs,
            "rounds": args.rounds,
            "goal": "overhead < 10 s and < 15 % of the plain time",
            "datasets": results,
        },
    )
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
