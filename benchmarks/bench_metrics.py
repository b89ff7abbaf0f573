"""Speed of tasks.metrics.evaluate against pytrec_eval on the same synthetic input.

Run: /work/venv/bin/python benchmarks/bench_metrics.py [--queries 10000] [--depth 100] [--repeats 3]

Input (seeded): 10,000 queries × 100 retrieved documents (1,000,000 run rows, rows shuffled,
scores rounded to 3 decimals so ~10% of the rows are in score ties) and ~30 graded judgements
per query (grades 0–3, about half of them on retrieved documents).

Measures: 6 families (nDCG, P, R, RR, AP, Success) × cutoffs 1, 5, 10, 100 = 24 measures.
pytrec_eval gets ``ndcg_cut``, ``P``, ``recall``, ``map_cut``, ``success`` at the same cutoffs
plus ``recip_rank`` once: it has no RR@k, so it does 1 RR computation where irflow does 4 (this
favours pytrec_eval slightly).

Timings (median of the repeats):
* irflow: ``evaluate(run_df, qrels_df, measures)`` — from DataFrames to the per-query table;
* pytrec_eval end to end: building its dict-of-dicts inputs from the same DataFrames, the
  ``RelevanceEvaluator`` and ``evaluate`` — what a user with DataFrames pays;
* pytrec_eval evaluate-only: ``RelevanceEvaluator(...)`` + ``evaluate(run_dict)`` on prebuilt dicts.

Writes ``benchmarks/results/metrics.json`` atomically and prints a one-line summary. Per-query
values of both tools are also compared (max absolute difference is reported).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

from irflow.tasks.metrics import evaluate, expand  # noqa: E402

FAMILIES = ["nDCG", "P", "R", "RR", "AP", "Success"]
CUTOFFS = [1, 5, 10, 100]
PYTREC = {"nDCG": "ndcg_cut", "P": "P", "R": "recall", "AP": "map_cut", "Success": "success"}


def synthetic(n_queries: int, depth: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A run (rows shuffled) and graded qrels; doc ids are unique within a query."""
    rng = np.random.default_rng(seed)
    n_docs = 1_000_000
    qids = np.array([f"q{i}" for i in range(n_queries)], dtype=object)
    start = rng.integers(0, n_docs, n_queries)
    docs = (start[:, None] + np.cumsum(rng.integers(1, 40, size=(n_queries, depth)), axis=1)) % n_docs
    scores = np.round(rng.random((n_queries, depth)), 3)  # 1,000 levels: ~9% of rows tie
    run = pd.DataFrame(
        {
            "query_id": np.repeat(qids, depth),
            "doc_id": np.char.add("d", docs.ravel().astype(str)).astype(object),
            "score": scores.ravel(),
        }
    )
    run = run.iloc[rng.permutation(len(run))].reset_index(drop=True)
    run = run.astype({"query_id": "str", "doc_id": "str"})
    # judgements: ~15 retrieved docs + ~15 unretrieved docs per query, grades 0..3
    judged_ret = rng.random((n_queries, depth)) < 0.15
    qr1 = pd.DataFrame(
        {"query_id": np.repeat(qids, depth)[judged_ret.ravel()], "doc": docs.ravel()[judged_ret.ravel()]}
    )
    extra = 15
    far = (start[:, None] + depth * 40 + 1 + np.arange(extra)[None, :] * 7) % n_docs
    qr2 = pd.DataFrame({"query_id": np.repeat(qids, extra), "doc": far.ravel()})
    qrels = pd.concat([qr1, qr2], ignore_index=True)
    qrels["doc_id"] = np.char.add("d", qrels["doc"].to_numpy().astype(str)).astype(object)
    qrels["relevance"] = rng.choice([0, 1, 2, 3], size=len(qrels), p=[0.4, 0.35, 0.15, 0.1]).astype(np.int64)
    qrels = qrels[["query_id", "doc_id", "relevance"]].astype({"query_id": "str", "doc_id": "str"})
    return run, qrels


def to_pytrec(run: pd.DataFrame, qrels: pd.DataFrame) -> tuple[dict, dict]:
    """The usual fast way to turn DataFrames into pytrec_eval's dict-of-dicts."""
    run_d: dict[str, dict[str, float]] = {}
    for q, d, s in zip(run["query_id"].tolist(), run["doc_id"].tolist(), run["score"].tolist()):
        run_d.setdefault(q, {})[d] = s
    qrels_d: dict[str, dict[str, int]] = {}
    for q, d, g in zip(qrels["query_id"].tolist(), qrels["doc_id"].tolist(), qrels["relevance"].tolist()):
        qrels_d.setdefault(q, {})[d] = int(g)
    return run_d, qrels_d


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "metrics.json")
    args = ap.parse_args()

    import pytrec_eval

    t_gen, (run, qrels) = timed(lambda: synthetic(args.queries, args.depth))
    measures = expand(FAMILIES, CUTOFFS)
    cut = ",".join(str(k) for k in CUTOFFS)
    pt_measures = {f"{v}.{cut}" for v in PYTREC.values()} | {"recip_rank"}

    def irflow():
        return evaluate(run, qrels, measures)

    def pytrec_end_to_end():
        run_d, qrels_d = to_pytrec(run, qrels)
        return pytrec_eval.RelevanceEvaluator(qrels_d, pt_measures).evaluate(run_d)

    run_d, qrels_d = to_pytrec(run, qrels)

    def pytrec_evaluate_only():
        return pytrec_eval.RelevanceEvaluator(qrels_d, pt_measures).evaluate(run_d)

    irflow()  # warm-up (imports, first-call allocations) for both sides
    pytrec_evaluate_only()
    t_ir, t_e2e, t_ev = [], [], []
    for _ in range(args.repeats):
        t, per_query = timed(irflow)
        t_ir.append(t)
        t, _res = timed(pytrec_end_to_end)
        t_e2e.append(t)
        t, res = timed(pytrec_evaluate_only)
        t_ev.append(t)

    # agreement on the measures both compute (pytrec_eval omits no query here: all are in the run)
    wide = per_query.pivot(index="query_id", columns="metric", values="value")
    max_diff = 0.0
    for fam, te in PYTREC.items():
        for k in CUTOFFS:
            ours = wide[f"{fam}@{k}"]
            theirs = pd.Series({q: v[f"{te}_{k}"] for q, v in res.items()})
            max_diff = max(max_diff, float((ours - theirs.reindex(ours.index)).abs().max()))
    theirs = pd.Series({q: v["recip_rank"] for q, v in res.items()})
    max_diff = max(max_diff, float((wide["RR@100"] - theirs.reindex(wide.index)).abs().max()))

    med_ir, med_e2e, med_ev = (statistics.median(x) for x in (t_ir, t_e2e, t_ev))
    result = {
        "command": "/work/venv/bin/python benchmarks/bench_metrics.py",
        "input": {
            "queries": args.queries,
            "depth": args.depth,
            "run_rows": len(run),
            "qrels_rows": len(qrels),
            "measures": [m.name for m in measures],
            "pytrec_eval_measures": sorted(pt_measures),
            "seed": 0,
        },
        "repeats": args.repeats,
        "seconds": {
            "irflow_evaluate": {"median": med_ir, "all": t_ir},
            "pytrec_eval_end_to_end": {"median": med_e2e, "all": t_e2e},
            "pytrec_eval_evaluate_only": {"median": med_ev, "all": t_ev},
        },
        "speedup_vs_pytrec_end_to_end": med_e2e / med_ir,
        "speedup_vs_pytrec_evaluate_only": med_ev / med_ir,
        "max_abs_diff_vs_pytrec": max_diff,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        "versions": {"numpy": np.__version__, "pandas": pd.__version__, "pytrec_eval": _version("pytrec-eval-terrier")},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".metrics.", suffix=".json.tmp", dir=args.output.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(result, fh, indent=2)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, args.output)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    print(
        f"metrics bench: {len(run):,} run rows, {len(measures)} measures, median of {args.repeats}: "
        f"irflow {med_ir:.3f}s | pytrec_eval {med_e2e:.3f}s end-to-end ({med_e2e / med_ir:.2f}x), "
        f"{med_ev:.3f}s evaluate-only ({med_ev / med_ir:.2f}x) | max |diff| {max_diff:.1e} -> {args.output}"
    )
    return 0


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    raise SystemExit(main())
