"""Reranking on the encoding backends: the real rerank path (``inference.score_pairs_many`` with the spec's
options, as ``rerank(...):<model>@bm25`` runs it) over SciFact's BM25 candidates.

* Bi-encoder rerank (all-MiniLM-L6-v2's cosine): speed and nDCG@10 of torch fp32, onnx int8, openvino
  int8 and bf16. The quality figures: nDCG@10 of the reranked BM25 top ``--top`` of ``--queries`` test
  queries (the first ones by query id), against fp32 torch on the same candidates.
* Cross-encoder (the ms-marco-MiniLM-L-6-v2 architecture: MiniLM-L6 body, one-logit head): no cross-encoder
  with trained weights can be installed offline, so the head is seeded (torch.manual_seed(0)) over
  all-MiniLM-L6-v2's body. Its speed is the architecture's; its nDCG would mean nothing, so fidelity is
  reported instead: the mean per-query Spearman correlation of each backend's scores with torch fp32's
  (first ``--fidelity-queries`` queries).

Speed: ``--speed-pairs`` (query, document) pairs, the first of the candidate list, scored by each backend in
turn, ``--rounds`` interleaved rounds in one process; per round torch's time over the backend's, median.
Targets (issue 13): >= 2x torch fp32 with |delta nDCG@10| <= 0.005.

    python benchmarks/bench_rerank_backends.py [--queries 100] [--top 30] [--speed-pairs 128] [--rounds 5]
        [--fidelity-queries 20]

Writes ``benchmarks/results/rerank_backends.json`` (atomically).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from _scifact import scifact  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

from irflow.tasks.core.atomic import write_json  # noqa: E402
from irflow.tasks.embed.inference import score_pairs_many  # noqa: E402
from irflow.tasks.embed.models import resolve_model  # noqa: E402
from irflow.tasks.index import bm25  # noqa: E402
from irflow.tasks.metrics import evaluate, mean, parse_measures  # noqa: E402
from irflow.tasks.systems.specs import parse_system  # noqa: E402

OPTIONS = {
    "torch-fp32": "",
    "onnx-int8": "backend=onnx,quantize=int8",
    "openvino-bf16": "backend=openvino,precision=bf16",
    "openvino-int8": "backend=openvino,quantize=int8",
}
CROSS_OPTIONS = {"torch-fp32": "", "onnx-fp32": "backend=onnx", **OPTIONS}


def seeded_cross_encoder(folder: Path) -> str:
    """all-MiniLM-L6-v2's body under a seeded one-logit head: the shape of cross-encoder/ms-marco-MiniLM-L-6-v2."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    body = resolve_model("minilm").path
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_pretrained(body, num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(body).save_pretrained(folder)
    return str(folder)


def score(model: str, options: str, items: list[tuple[str, list[str]]]) -> list[list[float]]:
    """The rerank stage's scoring call for ``rerank(<options>):<model>@bm25``."""
    spec = parse_system(f"rerank({options}):x@bm25") if options else None
    return score_pairs_many(model, items, encoder=spec)


def timed(model: str, options: dict[str, str], pairs: list[tuple[str, list[str]]], rounds: int) -> dict:
    """Seconds per round of each backend over the same pairs, interleaved; the paired median speedup."""
    for value in options.values():  # exports built and models loaded outside the timing
        score(model, value, [(pairs[0][0], pairs[0][1][:2])])
    seconds: dict[str, list[float]] = {name: [] for name in options}
    for _ in range(rounds):
        for name, value in options.items():
            start = time.perf_counter()
            score(model, value, pairs)
            seconds[name].append(time.perf_counter() - start)
    count = sum(len(docs) for _, docs in pairs)
    reference = np.array(seconds["torch-fp32"])
    return {
        "pairs": count,
        "seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
        "pairs_per_s_median": {k: round(count / float(np.median(v)), 2) for k, v in seconds.items()},
        "speedup_vs_torch_fp32": {k: round(float(np.median(reference / np.array(v))), 3) for k, v in seconds.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--speed-pairs", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fidelity-queries", type=int, default=20)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "rerank_backends.json"))
    args = parser.parse_args()

    data = scifact()
    judged = sorted(set(data.qrels["query_id"].astype(str)))[: args.queries]
    queries = data.queries[data.queries["query_id"].astype(str).isin(judged)].reset_index(drop=True)
    candidates = bm25.search(data, depth=args.top)
    candidates = candidates[candidates["query_id"].astype(str).isin(judged)]
    texts = dict(zip(data.corpus["doc_id"].astype(str), bm25.document_texts(data), strict=True))
    by_query = {str(q): g["doc_id"].astype(str).tolist() for q, g in candidates.groupby("query_id", sort=False)}
    qtext = dict(zip(queries["query_id"].astype(str), queries["text"], strict=True))
    ids = [q for q in judged if q in by_query]
    items = [(qtext[q], [texts[d] for d in by_query[q]]) for q in ids]
    speed_items, left = [], args.speed_pairs
    for query, docs in items:
        if left <= 0:
            break
        speed_items.append((query, docs[:left]))
        left -= len(docs[:left])

    load_before = os.getloadavg()
    measures = parse_measures(["nDCG@10"])
    qrels = data.qrels[data.qrels["query_id"].astype(str).isin(ids)]
    bi_speed = timed("minilm", OPTIONS, speed_items, args.rounds)
    ndcg = {}
    for name, options in OPTIONS.items():
        scores = score("minilm", options, items)
        run = pd.DataFrame(
            [(q, d, s) for q, ss in zip(ids, scores, strict=True) for d, s in zip(by_query[q], ss, strict=True)],
            columns=["query_id", "doc_id", "score"],
        )
        ndcg[name] = mean(evaluate(run, qrels, measures))["nDCG@10"]
    with tempfile.TemporaryDirectory() as folder:
        cross = seeded_cross_encoder(Path(folder) / "cross-encoder")
        cross_speed = timed(cross, CROSS_OPTIONS, speed_items, args.rounds)
        reference = score(cross, "", items[: args.fidelity_queries])
        fidelity = {}
        for name, options in CROSS_OPTIONS.items():
            got = score(cross, options, items[: args.fidelity_queries])
            rhos = [spearmanr(a, b)[0] for a, b in zip(got, reference, strict=True) if len(a) > 1]
            fidelity[name] = round(float(np.mean(rhos)), 4)
    load_after = os.getloadavg()
    bi_delta = {k: round(v - ndcg["torch-fp32"], 4) for k, v in ndcg.items()}

    result = {
        "benchmark": "reranking on the encoding backends, SciFact test, BM25 candidates",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "threads": {"torch": torch.get_num_threads()},
        "candidates": f"BM25 (irflow default) top {args.top} of the first {len(ids)} judged test queries by id",
        "bi_encoder_rerank": {
            "model": "sentence-transformers/all-MiniLM-L6-v2 (cosine of query and document vectors)",
            "speed": bi_speed,
            "ndcg_at_10": {k: round(v, 4) for k, v in ndcg.items()},
            "delta_ndcg_at_10_vs_torch_fp32": bi_delta,
        },
        "cross_encoder": {
            "model": "MiniLM-L6 body (all-MiniLM-L6-v2) + seeded one-logit head: the ms-marco-MiniLM-L-6-v2 shape",
            "speed": cross_speed,
            "mean_spearman_vs_torch_fp32": fidelity,
            "fidelity_queries": min(args.fidelity_queries, len(items)),
            "quality": "not measurable offline: no cross-encoder with trained weights is installable here",
        },
        "targets": {"speedup": ">= 2", "|delta nDCG@10|": "<= 0.005"},
        "command": "python benchmarks/bench_rerank_backends.py " + " ".join(sys.argv[1:]),
    }
    write_json(args.output, result)
    print("bi-encoder", bi_speed["speedup_vs_torch_fp32"], bi_delta)
    print("cross-encoder", cross_speed["speedup_vs_torch_fp32"], fidelity)


if __name__ == "__main__":
    main()
