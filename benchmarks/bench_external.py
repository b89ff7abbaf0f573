"""Speed of systems built elsewhere: a ``run:`` file of 1,000 queries × 1,000 hits, and what ``http:`` adds
per query over the service's own time.

Run: python benchmarks/bench_external.py [--queries 1000] [--hits 1000] [--repeats 5] [--requests 300]
[--http-repeats 9]

run: (seeded synthetic dataset: 100,000 documents, 1,000 queries, 5 judgements each; the run file
has every query with 1,000 hits, scores rounded to 4 decimals so ties occur). Timed end to end as
``irflow run`` would do it for the system, median of the repeats: parse the spec (sha256 of the
file), ``retrieve`` (read + check + drop unknown ids + trec_eval order + cut at depth 1000) and
``metrics.evaluate`` of nDCG@10, nDCG@1000, R@100, R@1000, P@10, AP@1000 — for the TREC, JSON and
Parquet forms of the same run, the forms interleaved within each repeat (load average recorded).

http: a service (tests/_search_service.py, a Python http.server on 127.0.0.1, keep-alive) answers
every query with 100 hits and reports its own handling time (``X-Service-Ms``, and summed over a batch
at ``/stats``). At concurrency 1 (``http(concurrency=1)``), interleaved within each repeat (each pass
leads in turn), against the same service: (a) the latency path, what irflow's latency stage times per
query (``Searcher.query``: request body, POST through the client with its retry policy, JSON decode,
hits read at their paths); (b) the retrieval path, what produces the evaluated run table
(``retrieve``: every query one after another, then one run table, id checks and trec_eval order),
per query = its search time / queries; (c) a bare ``http.client`` keep-alive POST of the same body with
``json.loads`` of the answer, the floor any client pays. Per pass: mean ms per query, the service's own
mean time in that pass, and their difference (``over_service_ms``, the figure the target of 1 ms is
about); reported as medians over the repeats (each repeat's value listed), with the 1-minute load
average before each repeat and after the last.

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

from irflow.tasks.core.atomic import write_json  # noqa: E402
from irflow.tasks.core.schema import Dataset  # noqa: E402
from irflow.tasks.metrics import evaluate  # noqa: E402
from irflow.tasks.retrieve.searchers import make_searcher, retrieve  # noqa: E402
from irflow.tasks.systems.specs import parse_system  # noqa: E402

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


def time_run_once(dataset: Dataset, path: Path) -> tuple[float, float, float, int]:
    """Seconds to parse the spec (hash), retrieve and evaluate one run file; and the run's rows."""
    os.utime(path)  # a new mtime: the spec hashes the file again, as a fresh process would
    start = time.perf_counter()
    spec = parse_system(f"run:{path}")
    parsed = time.perf_counter()
    result = retrieve(dataset, spec, depth=1000)
    retrieved = time.perf_counter()
    evaluate(result.run, dataset.qrels, MEASURES)
    done = time.perf_counter()
    return parsed - start, retrieved - parsed, done - retrieved, len(result.run)


def time_run_files(dataset: Dataset, paths: dict[str, Path], repeats: int) -> dict[str, object]:
    """Each form timed ``repeats`` times, the forms interleaved within a repeat; medians, with each repeat's
    total and the 1-minute load average before each repeat and after the last."""
    times: dict[str, list[tuple[float, float, float, int]]] = {form: [] for form in paths}
    loads = []
    for _ in range(repeats):
        loads.append(round(os.getloadavg()[0], 2))
        for form, path in paths.items():
            times[form].append(time_run_once(dataset, path))
    loads.append(round(os.getloadavg()[0], 2))
    out: dict[str, object] = {"load_average_1min": loads}
    for form, parts in times.items():
        totals = [sum(p[:3]) for p in parts]
        middle = parts[int(np.argsort(totals)[len(totals) // 2])]
        out[form] = {
            "seconds": round(statistics.median(totals), 3),
            "hash_seconds": round(middle[0], 3),
            "retrieve_seconds": round(middle[1], 3),
            "metrics_seconds": round(middle[2], 3),
            "rows": middle[3],
            "seconds_per_repeat": [round(t, 3) for t in totals],
            "megabytes": round(paths[form].stat().st_size / 1e6, 1),
        }
    return out


def _service_ms(conn: http.client.HTTPConnection) -> list[float]:
    """The service's own times (ms) of the searches it answered since the previous call (``/stats``)."""
    conn.request("POST", "/stats", body=b"{}", headers={"Content-Type": "application/json"})
    return [float(x) for x in json.loads(conn.getresponse().read())["own_ms"]]


def bench_http(requests: int, repeats: int, hits: int = 100) -> dict[str, object]:
    """Both ``http:`` paths against one service at concurrency 1, interleaved per repeat (see the module
    docstring); the figures are medians over the repeats."""
    from irflow.tasks.retrieve.http_service import HttpSearcher

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
            queries = pd.DataFrame({"query_id": [f"q{i}" for i in range(requests)], "text": list(answers)})
            corpus = pd.DataFrame({"doc_id": [f"d{j}" for j in range(hits)], "title": "", "text": "x"})
            qrels = pd.DataFrame({"query_id": ["q0"], "doc_id": ["d0"], "relevance": [1]})
            dataset = Dataset("svc", "test", corpus, queries, qrels, {"fingerprint": "svc"})
            spec = parse_system(f"http(concurrency=1,retries=0,load=none):http://127.0.0.1:{port}/search")
            online = make_searcher(dataset, spec, online=True)
            texts = list(answers)

            def bare() -> list[float]:
                took = []
                for text in texts:
                    body = json.dumps({"query": text, "k": hits}).encode()
                    start = time.perf_counter()
                    conn.request("POST", "/search", body=body, headers={"Content-Type": "application/json"})
                    json.loads(conn.getresponse().read())
                    took.append(time.perf_counter() - start)
                return took

            def latency() -> list[float]:  # what the latency stage times: Searcher.query, one query at a time
                took = []
                for i, text in enumerate(texts):
                    start = time.perf_counter()
                    online.query(f"q{i}", text, hits)
                    took.append(time.perf_counter() - start)
                return took

            def retrieval() -> list[float]:
                """What produces the evaluated run table (``retrieve``'s search: ``searcher(queries, depth)``),
                split per query: from one query's request to the next one's, the last one's up to the
                finished table, so the table's build lands on the last query (then shared out evenly)."""
                searcher = make_searcher(dataset, spec)
                assert isinstance(searcher, HttpSearcher)
                starts: list[float] = []
                query = searcher._query

                def timed(text: str, k: int, vector: list[float] | None = None) -> tuple[list[str], list[float]]:
                    starts.append(time.perf_counter())
                    return query(text, k, vector)

                searcher._query = timed  # type: ignore[method-assign]
                begin = time.perf_counter()
                run = searcher(dataset.queries, hits)
                end = time.perf_counter()
                assert len(run) == requests * hits
                took = list(np.diff([*starts, end]))
                table = took[-1] - statistics.median(took[:-1])  # the last query's request, then the table
                took[-1] -= table
                took[0] += starts[0] - begin
                return [t + (table / len(took)) for t in took]

            passes = {"bare_client": bare, "latency_path": latency, "retrieval_path": retrieval}
            for run_pass in passes.values():  # warm-up: connections, first-call imports
                run_pass()
            _service_ms(conn)
            rounds: dict[str, list[dict[str, float]]] = {name: [] for name in passes}
            loads = []
            for r in range(repeats):
                loads.append(round(os.getloadavg()[0], 2))
                names = list(passes)[r % 3 :] + list(passes)[: r % 3]  # interleaved: each pass leads in turn
                for name in names:
                    took = np.asarray(passes[name](), dtype=np.float64) * 1000
                    own = np.asarray(_service_ms(conn))
                    assert len(own) == requests, (name, len(own))
                    rounds[name].append(
                        {
                            "ms_p50": float(np.median(took)),
                            "ms_mean": float(took.mean()),
                            "service_ms_p50": float(np.median(own)),
                            "service_ms_mean": float(own.mean()),
                            "over_service_ms": float(np.median(took) - np.median(own)),
                            "over_service_ms_mean": float(took.mean() - own.mean()),
                        }
                    )
            loads.append(round(os.getloadavg()[0], 2))
            conn.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    out: dict[str, object] = {
        "requests": requests,
        "hits_per_answer": hits,
        "concurrency": 1,
        "repeats": repeats,
        "load_average_1min": loads,
        "target_over_service_ms": 1.0,
    }
    for name, figures in rounds.items():
        summary: dict[str, object] = {key: round(statistics.median(f[key] for f in figures), 3) for key in figures[0]}
        summary["over_service_ms_per_repeat"] = [round(f["over_service_ms"], 3) for f in figures]
        out[name] = summary
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--http-repeats", type=int, default=9)
    args = parser.parse_args()
    dataset, run = synthetic(args.queries, args.hits)
    results: dict[str, object] = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
    }
    with tempfile.TemporaryDirectory() as tmp:
        timings = time_run_files(dataset, write_forms(run, Path(tmp)), args.repeats)
    results["run_file"] = {"queries": args.queries, "hits_per_query": args.hits, "measures": MEASURES, **timings}
    results["http"] = bench_http(args.requests, args.http_repeats)
    write_json(ROOT / "benchmarks" / "results" / "external.json", results)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
