"""Speed of systems built elsewhere: a ``run:`` file of 1,000 queries × 1,000 hits, and what ``http:`` adds
per query over the service's own time.

Run: python benchmarks/bench_external.py [--queries 1000] [--hits 1000] [--repeats 3] [--requests 300]

run: (seeded synthetic dataset: 100,000 documents, 1,000 queries, 5 judgements each; the run file
has every query with 1,000 hits, scores rounded to 4 decimals so ties occur). Timed end to end as
``irflow run`` would do it for the system, median of the repeats: parse the spec (sha256 of the
file), ``retrieve`` (read + check + drop unknown ids + trec_eval order + cut at depth 1000) and
``metrics.evaluate`` of nDCG@10, nDCG@1000, R@100, R@1000, P@10, AP@1000 — for the TREC, JSON and
Parquet forms of the same run.

http: a service (tests/_search_service.py, a Python http.server on 127.0.0.1, keep-alive) answers
every query with 100 hits and reports its own handling time in ``X-Service-Ms``. At concurrency 1
we time (a) what irflow's latency stage times per query (``searcher.query``: request body, POST
through the client with its retry policy, JSON decode, hits read at their paths), (a') the whole
search path (``searcher(one query, 100)``: (a) plus the run table, id checks and trec_eval order),
interleaved with (a), and (b) a bare
``http.client`` keep-alive POST of the same body with ``json.loads`` of the answer, the floor any
client pays. Reported: medians of (a), (b), the service's own time, and the overheads (a) − service
time and (a) − (b) (irflow over the bare client).

Writes ``benchmarks/results/external.json`` (atomically) and prints it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

from irflow.tasks.atomic import write_json  # noqa: E402
from irflow.tasks.metrics import evaluate  # noqa: E402
from irflow.tasks.retrieve import make_searcher, retrieve  # noqa: E402
from irflow.tasks.schema import Dataset  # noqa: E402
from irflow.tasks.systems import parse_system  # noqa: E402

MEASURES = ["nDCG@10", "nDCG@1000", "R@100", "R@1000", "P@10", "AP@1000"]


def synthetic(queries: int, hits: int, docs: int = 100_000, seed: int = 0) -> tuple[Dataset, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    doc_ids = np.array([f"d{i}" for i in range(docs)], dtype=object)
    qids = np.array([f"q{i}" for i in range(queries)], dtype=object)
    corpus = pd.DataFrame({"doc_id": doc_ids, "title": "", "text": "x"})
    qframe = pd.DataFrame({"query_id": qids, "text": [f"query {i}" for i in range(queries)]})
    qrels = pd.DataFrame(
        {
            "query_id": np.repeat(qids, 5),
            "doc_id": doc_ids[rng.integers(0, docs, 5 * queries)],
            "relevance": rng.integers(1, 4, 5 * queries),
        }
    ).drop_duplicates(["query_id", "doc_id"])
    chosen = np.concatenate([rng.choice(docs, hits, replace=False) for _ in range(queries)])
    run = pd.DataFrame(
        {
            "query_id": np.repeat(qids, hits),
            "doc_id": doc_ids[chosen],
            "score": np.round(rng.random(queries * hits) * 20, 4),
        }
    )
    dataset = Dataset("synthetic", "test", corpus, qframe, qrels, {"fingerprint": f"synthetic-{seed}"})
    return dataset, run


def write_forms(run: pd.DataFrame, folder: Path) -> dict[str, Path]:
    trec = folder / "run.trec"
    ranks = run.groupby("query_id").cumcount() + 1
    lines = run["query_id"] + " Q0 " + run["doc_id"] + " " + ranks.astype(str) + " " + run["score"].astype(str) + " x"
    trec.write_text("\n".join(lines) + "\n")
    nested: dict[str, dict[str, float]] = {}
    for q, d, s in run.itertuples(index=False):
        nested.setdefault(q, {})[d] = s
    (folder / "run.json").write_text(json.dumps(nested))
    run.to_parquet(folder / "run.parquet", index=False)
    return {"trec": trec, "json": folder / "run.json", "parquet": folder / "run.parquet"}


def time_run_file(dataset: Dataset, path: Path, repeats: int) -> dict[str, float]:
    totals, parts = [], []
    for _ in range(repeats):
        os.utime(path)  # a new mtime: the spec hashes the file again, as a fresh process would
        start = time.perf_counter()
        spec = parse_system(f"run:{path}")
        parsed = time.perf_counter()
        result = retrieve(dataset, spec, depth=1000)
        retrieved = time.perf_counter()
        evaluate(result.run, dataset.qrels, MEASURES)
        done = time.perf_counter()
        totals.append(done - start)
        parts.append((parsed - start, retrieved - parsed, done - retrieved))
    best = int(np.argsort(totals)[len(totals) // 2])
    return {
        "seconds": round(statistics.median(totals), 3),
        "hash_seconds": round(parts[best][0], 3),
        "retrieve_seconds": round(parts[best][1], 3),
        "metrics_seconds": round(parts[best][2], 3),
        "rows": len(result.run),
    }


def bench_http(requests: int, hits: int = 100) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        answers = {f"query {i}": [[f"d{j}", float(100 - j)] for j in range(hits)] for i in range(requests)}
        (Path(tmp) / "hits.json").write_text(json.dumps(answers))
        service = ROOT / "tests" / "_search_service.py"
        proc = subprocess.Popen(
            [sys.executable, str(service), str(Path(tmp) / "hits.json"), str(Path(tmp) / "log")],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            port = int(proc.stdout.readline())  # type: ignore[union-attr]
            conn = http.client.HTTPConnection("127.0.0.1", port)
            for _ in range(2):  # the service answers its first two requests 429 and 503 (the tests' faults)
                conn.request("POST", "/search", body=b"{}", headers={"Content-Type": "application/json"})
                conn.getresponse().read()
            bare, own = [], []
            for i in range(requests):
                body = json.dumps({"query": f"query {i}", "k": hits}).encode()
                start = time.perf_counter()
                conn.request("POST", "/search", body=body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                json.loads(response.read())
                bare.append(time.perf_counter() - start)
                own.append(float(response.getheader("X-Service-Ms", "nan")) / 1000)
            conn.close()
            queries = pd.DataFrame({"query_id": [f"q{i}" for i in range(requests)], "text": list(answers)})
            corpus = pd.DataFrame({"doc_id": [f"d{j}" for j in range(hits)], "title": "", "text": "x"})
            qrels = pd.DataFrame({"query_id": ["q0"], "doc_id": ["d0"], "relevance": [1]})
            dataset = Dataset("svc", "test", corpus, queries, qrels, {"fingerprint": "svc"})
            searcher = make_searcher(dataset, parse_system(f"http(retries=0):http://127.0.0.1:{port}/search"))
            singles = [queries.iloc[[i]] for i in range(requests)]
            searcher(singles[0], hits)  # connect
            ours, table = [], []
            for i, one in enumerate(singles):  # interleaved: what latency times, then the whole search path
                start = time.perf_counter()
                searcher.query(f"q{i}", f"query {i}", hits)
                ours.append(time.perf_counter() - start)
                start = time.perf_counter()
                searcher(one, hits)
                table.append(time.perf_counter() - start)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    pairs = (("irflow", ours), ("table", table), ("bare", bare), ("service", own))
    ms = {k: statistics.median(v) * 1000 for k, v in pairs}
    return {
        "requests": requests,
        "hits_per_answer": hits,
        "irflow_ms_p50": round(ms["irflow"], 3),
        "irflow_with_run_table_ms_p50": round(ms["table"], 3),
        "bare_client_ms_p50": round(ms["bare"], 3),
        "service_own_ms_p50": round(ms["service"], 3),
        "irflow_over_service_ms": round(ms["irflow"] - ms["service"], 3),
        "irflow_over_bare_client_ms": round(ms["irflow"] - ms["bare"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    dataset, run = synthetic(args.queries, args.hits)
    results: dict[str, object] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "run_file": {"queries": args.queries, "hits_per_query": args.hits, "measures": MEASURES},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for form, path in write_forms(run, Path(tmp)).items():
            timing = time_run_file(dataset, path, args.repeats)
            results["run_file"][form] = {**timing, "megabytes": round(path.stat().st_size / 1e6, 1)}  # type: ignore[index]
    results["http"] = bench_http(args.requests)
    write_json(ROOT / "benchmarks" / "results" / "external.json", results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
