"""BM25 speed on SciFact (test): irflow's bm25s path vs rank-bm25, side by side in one process.

Both backends get the same data and the same tokenizer output (bm25s takes it as ids + vocab, its
native form; rank-bm25 as the decoded token strings) and search through the same irflow code
(``BM25Index.search``: query tokenisation, top-k with trec_eval tie order, run table). Figures:

* core       index from tokens + search all 300 queries at depth 100 (the headline ratio); irflow
             builds bm25s's score matrix with whole-array numpy (``tasks.index.bm25.build_scores``);
             bm25s's own per-document build is timed beside it for reference
* search     the 300-query search alone (queries/s)
* end-to-end ``tasks.index.bm25.search`` from the dataset: tokenise + index (+ cache write) + search;
             irflow cold (empty cache), tokens cached (a new k1/b on a tokenized corpus: a
             parameter sweep), warm (cached index), rank-bm25 (never cached)

Each timing is the median of ``--repeat`` runs. nDCG@10 of both is recorded as a sanity check.

    python benchmarks/bench_bm25.py [--repeat 3]

Writes benchmarks/results/bm25.json (atomically).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

from irflow.tasks.core.atomic import write_json  # noqa: E402
from irflow.tasks.index import bm25  # noqa: E402
from irflow.tasks.metrics import evaluate, mean  # noqa: E402
from irflow.tasks.systems.specs import BM25Spec, parse_system  # noqa: E402

SHARED = Path(os.environ.get("IRFLOW_SHARED_DIR") or ROOT.parent / "shared") / "datasets" / "beir"
DEPTH = 100


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time of ``repeat`` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def ndcg_at_10(dataset: Any, run: Any) -> float:
    """Mean nDCG@10 over every judged query, by irflow's trec_eval-exact metrics."""
    return round(mean(evaluate(run, dataset.qrels, ["nDCG@10"]))["nDCG@10"], 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "bm25.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["IRFLOW_CACHE_DIR"] = str(Path(tmp) / "cache")
        from irflow.tasks.ingest import import_dataset, load_dataset

        import_dataset(SHARED / "scifact.zip", "beir", "bench-scifact")
        dataset = load_dataset("bench-scifact", "test")
        import bm25s
        import rank_bm25

        fast_spec, slow_spec = BM25Spec(), parse_system("bm25:backend=rank_bm25")
        texts = bm25.document_texts(dataset)
        doc_ids = dataset.corpus["doc_id"].astype(str).to_numpy(dtype=object)
        qids, qtexts = dataset.queries["query_id"].tolist(), dataset.queries["text"].tolist()

        tokenize_ids_s, token_ids = timed(lambda: bm25.tokenize(texts, fast_spec, return_ids=True), args.repeat)
        tokenize_str_s, token_strs = timed(lambda: bm25.tokenize(texts, fast_spec), args.repeat)

        def fresh_ids() -> Any:  # bm25s's index() adds "" to the vocab it is given: give each build its own
            return token_ids._replace(vocab=dict(token_ids.vocab))

        def bm25s_index() -> bm25.BM25Index:  # irflow's build: bm25s with the vectorised score matrix
            engine = bm25._engine(fast_spec)
            engine.index(fresh_ids(), show_progress=False)
            return bm25.BM25Index(fast_spec, doc_ids, engine, 0.0, 0.0, cached=False)

        def bm25s_stock_index() -> None:  # bm25s's own per-document build, for reference
            engine = bm25s.BM25(k1=fast_spec.k1, b=fast_spec.b, method=fast_spec.method)
            engine.index(fresh_ids(), show_progress=False)

        def rank_bm25_index() -> bm25.BM25Index:
            engine = rank_bm25.BM25Okapi(token_strs, k1=slow_spec.k1, b=slow_spec.b)
            return bm25.BM25Index(slow_spec, doc_ids, engine, 0.0, 0.0, cached=False)

        fast_index_s, fast_index = timed(bm25s_index, args.repeat)
        stock_index_s, _ = timed(bm25s_stock_index, args.repeat)
        slow_index_s, slow_index = timed(rank_bm25_index, args.repeat)
        fast_search_s, fast_run = timed(lambda: fast_index.search(qids, qtexts, DEPTH), args.repeat)
        slow_search_s, slow_run = timed(lambda: slow_index.search(qids, qtexts, DEPTH), args.repeat)

        def cold() -> Any:
            shutil.rmtree(Path(tmp) / "cache" / "bm25", ignore_errors=True)
            return bm25.search(dataset, fast_spec, DEPTH)

        def new_parameters() -> Any:  # a k1/b sweep step: the corpus tokens are cached, the index is not
            shutil.rmtree(Path(tmp) / "cache" / "bm25" / "index", ignore_errors=True)
            return bm25.search(dataset, fast_spec, DEPTH)

        cold_s, _ = timed(cold, args.repeat)
        sweep_s, _ = timed(new_parameters, args.repeat)
        warm_s, warm_run = timed(lambda: bm25.search(dataset, fast_spec, DEPTH), args.repeat)
        e2e_slow_s, _ = timed(lambda: bm25.search(dataset, slow_spec, DEPTH), args.repeat)

    core_fast, core_slow = fast_index_s + fast_search_s, slow_index_s + slow_search_s
    n_queries = len(qids)
    result = {
        "dataset": {
            "name": "beir/scifact",
            "split": "test",
            "documents": len(doc_ids),
            "queries": n_queries,
            "depth": DEPTH,
        },
        "tokenize_corpus_seconds": {
            "ids_for_bm25s": round(tokenize_ids_s, 4),
            "strings_for_rank_bm25": round(tokenize_str_s, 4),
        },
        "bm25s": {
            "index_seconds": round(fast_index_s, 4),
            "stock_bm25s_index_seconds": round(stock_index_s, 4),
            "search_seconds": round(fast_search_s, 4),
            "queries_per_second": round(n_queries / fast_search_s, 1),
            "ndcg_at_10": ndcg_at_10(dataset, fast_run),
        },
        "rank_bm25": {
            "index_seconds": round(slow_index_s, 4),
            "search_seconds": round(slow_search_s, 4),
            "queries_per_second": round(n_queries / slow_search_s, 1),
            "ndcg_at_10": ndcg_at_10(dataset, slow_run),
        },
        "end_to_end_seconds": {
            "irflow_bm25s_cold": round(cold_s, 4),
            "irflow_bm25s_tokens_cached": round(sweep_s, 4),
            "irflow_bm25s_warm": round(warm_s, 4),
            "rank_bm25": round(e2e_slow_s, 4),
        },
        "speedup": {
            "core_index_plus_search": round(core_slow / core_fast, 1),
            "search_only": round(slow_search_s / fast_search_s, 1),
            "end_to_end_cold": round(e2e_slow_s / cold_s, 1),
            "end_to_end_tokens_cached": round(e2e_slow_s / sweep_s, 1),
            "end_to_end_warm": round(e2e_slow_s / warm_s, 1),
        },
        "target": "core_index_plus_search >= 10",
        "repeat": args.repeat,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "bm25s": metadata.version("bm25s"),
            "rank_bm25": metadata.version("rank-bm25"),
        },
    }
    result["target_met"] = result["speedup"]["core_index_plus_search"] >= 10
    write_json(args.output, result)
    sp = result["speedup"]
    print(
        f"bm25s vs rank-bm25 on SciFact: index+search {core_fast:.3f}s vs {core_slow:.3f}s "
        f"({sp['core_index_plus_search']}x); search only {sp['search_only']}x; "
        f"end-to-end cold {sp['end_to_end_cold']}x, new k1/b {sp['end_to_end_tokens_cached']}x, "
        f"warm {sp['end_to_end_warm']}x "
        f"-> {args.output}"
    )


if __name__ == "__main__":
    main()
