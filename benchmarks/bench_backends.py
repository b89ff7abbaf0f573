"""Encoding backends: documents/s and nDCG@10 of all-MiniLM-L6-v2 as torch fp32 (the reference),
ONNX Runtime fp32 and int8 (``dense(backend=onnx,quantize=int8):minilm``), OpenVINO fp32, bf16 and
int8 (NNCF) on SciFact.

Speed: a fixed sample of ``--speed-docs`` corpus documents (seed 0), encoded by each backend in turn,
``--rounds`` rounds interleaved in one process (A B C A B C), batch 32; exports are built before timing.
The speedup is paired: per round torch's time over the backend's, median over rounds.
Quality: the 300 test queries against their judged documents plus ``--sample`` further corpus
documents (seed 1), the same subset for every backend; nDCG@10 by exact inner-product search.
Target: onnx int8 >= 2.5x torch fp32 docs/s with |delta nDCG@10| <= 0.005.

    python benchmarks/bench_backends.py [--speed-docs 256] [--rounds 3] [--sample 500]

Writes ``benchmarks/results/backends.json`` (atomically).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _scifact import scifact  # noqa: E402

from irflow.tasks.core.atomic import write_json  # noqa: E402
from irflow.tasks.embed.inference import encode  # noqa: E402
from irflow.tasks.embed.models import BackendUnavailableError, resolve_model, with_encoder  # noqa: E402
from irflow.tasks.embed.vectors import document_texts  # noqa: E402
from irflow.tasks.systems.specs import parse_system  # noqa: E402

SYSTEMS = {
    "torch-fp32": "dense:minilm",
    "onnx-fp32": "dense(backend=onnx):minilm",
    "onnx-int8": "dense(backend=onnx,quantize=int8):minilm",
    "openvino-fp32": "dense(backend=openvino):minilm",
    "openvino-bf16": "dense(backend=openvino,precision=bf16):minilm",
    "openvino-int8": "dense(backend=openvino,quantize=int8):minilm",
}


def ndcg_at_10(qv: np.ndarray, dv: np.ndarray, query_ids: list[str], doc_ids: list[str], qrels: dict) -> float:
    """Mean nDCG@10 (linear gain rel/log2(i+1), Järvelin & Kekäläinen 2002) over the judged queries."""
    scores = qv @ dv.T
    discounts = 1.0 / np.log2(np.arange(2, 12))
    total = 0.0
    for row, qid in enumerate(query_ids):
        top = np.argsort(-scores[row], kind="stable")[:10]
        gains = np.array([qrels[qid].get(doc_ids[i], 0) for i in top], dtype=float)
        ideal = np.sort(np.array(list(qrels[qid].values()), dtype=float))[::-1][:10]
        total += (gains * discounts[: len(gains)]).sum() / (ideal * discounts[: len(ideal)]).sum()
    return total / len(query_ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--speed-docs", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "backends.json"))
    parser.add_argument(
        "--backend", action="append", choices=list(SYSTEMS), help="measure only these (repeatable; torch-fp32 always)"
    )
    args = parser.parse_args()

    data = scifact()
    corpus, queries = data.corpus.reset_index(drop=True), data.queries
    qrels: dict[str, dict[str, int]] = {}
    for q, d, r in data.qrels[["query_id", "doc_id", "relevance"]].itertuples(index=False):
        qrels.setdefault(str(q), {})[str(d)] = int(r)
    base = resolve_model("minilm")
    wanted = {"torch-fp32", *(args.backend or SYSTEMS)}
    models = {name: with_encoder(base, parse_system(spec)) for name, spec in SYSTEMS.items() if name in wanted}
    texts = document_texts(corpus)
    speed_rows = np.random.default_rng(0).choice(len(texts), args.speed_docs, replace=False)
    speed_texts = [texts[i] for i in speed_rows]
    unavailable = {}
    for name, model in list(models.items()):  # load models and build exports outside the timing
        try:
            encode(model, speed_texts[:8], prompt="", max_seq_length=None)
        except BackendUnavailableError as exc:  # e.g. bf16 on a CPU without BF16 units: said, not measured
            unavailable[name] = str(exc)
            del models[name]

    seconds: dict[str, list[float]] = {name: [] for name in models}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, model in models.items():
            start = time.perf_counter()
            encode(model, speed_texts, prompt="", max_seq_length=None)
            seconds[name].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    docs_per_s = {name: args.speed_docs / float(np.median(s)) for name, s in seconds.items()}

    judged = set(data.qrels["doc_id"].astype(str))
    rng = np.random.default_rng(1)
    others = [i for i in rng.permutation(len(corpus)) if corpus["doc_id"][i] not in judged][: args.sample]
    subset = sorted({*np.flatnonzero(corpus["doc_id"].isin(judged)), *others})
    doc_ids = corpus["doc_id"].astype(str)[subset].tolist()
    sub_texts = [texts[i] for i in subset]
    query_ids = queries["query_id"].astype(str).tolist()
    ndcg = {}
    for name, model in models.items():
        qv = encode(model, queries["text"].tolist(), prompt="", max_seq_length=None)
        dv = encode(model, sub_texts, prompt="", max_seq_length=None)
        ndcg[name] = ndcg_at_10(qv, dv, query_ids, doc_ids, qrels)

    reference = "torch-fp32"
    result = {
        "benchmark": "encoding backends, all-MiniLM-L6-v2, SciFact test",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "note": "shared 2-core machine under load from other jobs; ratios are from interleaved rounds in one process",
        "speed": {
            "docs": args.speed_docs,
            "sample": "corpus rows chosen with numpy default_rng(0), text = title + ' ' + text",
            "rounds": args.rounds,
            "seconds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
            "docs_per_s_median": {k: round(v, 2) for k, v in docs_per_s.items()},
            # the headline: per round, torch's time over this backend's in the same round (paired, so a load
            # change between rounds cancels), then the median over rounds; the fastest rounds' ratio beside it
            "speedup_vs_torch_fp32": {
                k: round(float(np.median(np.array(seconds[reference]) / np.array(v))), 3) for k, v in seconds.items()
            },
            "speedup_of_fastest_rounds": {k: round(min(seconds[reference]) / min(v), 3) for k, v in seconds.items()},
        },
        "quality": {
            "collection": f"{len(subset)} docs: every judged doc of the test qrels plus {len(others)} others "
            "(default_rng(1)); all judged test queries",
            "queries": len(query_ids),
            "ndcg_at_10": {k: round(v, 4) for k, v in ndcg.items()},
            "delta_ndcg_at_10_vs_torch_fp32": {k: round(v - ndcg[reference], 4) for k, v in ndcg.items()},
        },
        "targets": {"onnx-int8 speedup": ">= 2.5", "|delta nDCG@10|": "<= 0.005"},
        "threads": {"torch": torch.get_num_threads(), "cpu_count": os.cpu_count()},
        "unavailable": unavailable,
        "not_measured": {
            "rerank": "benchmarks/bench_rerank_backends.py (bi-encoder rerank and the cross-encoder shape)",
            "gpu fp16": "no GPU on this machine",
        },
        "command": "python benchmarks/bench_backends.py " + " ".join(sys.argv[1:]),
    }
    write_json(args.output, result)
    print(result["speed"]["speedup_vs_torch_fp32"], result["quality"]["delta_ndcg_at_10_vs_torch_fp32"])


if __name__ == "__main__":
    main()
