"""Interleaving against a CTR A/B test on the same simulated users: SciFact, BM25 vs MiniLM.

The corpus is a subset of SciFact's test split (``tests/_scifact.py``: the judged documents of the first
queries, topped up with other documents, ``--docs`` in all), so MiniLM encodes it in a minute on two
cores. For each click model: team-draft interleaving's wins/ties/losses over ``--users`` simulated users,
the CTR of each system's own list, and the queries each test needs for 80 % power at α = 0.05
(:func:`irflow.tasks.online.interleave_power.queries_to_detect`, seeded).

    python benchmarks/bench_interleave.py [--docs 400] [--users 5000] [--output benchmarks/results/interleave.json]
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _scifact import scifact  # noqa: E402

from irflow.tasks.core.atomic import write_json  # noqa: E402
from irflow.tasks.metrics import evaluate, mean  # noqa: E402
from irflow.tasks.online import house_grades, outcome, parse_click_model, queries_to_detect, simulate  # noqa: E402
from irflow.tasks.retrieve.searchers import retrieve  # noqa: E402

SYSTEMS = ("bm25", "dense(max_seq_length=64):minilm")
MODELS = ("pbm", "cascade", "cascade:gamma=0.05/0.2/0.4/0.8,stop=0.5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "interleave.json"))
    args = parser.parse_args()
    dataset = scifact(args.docs)
    runs = {s: retrieve(dataset, s, 10).run for s in SYSTEMS}
    ndcg = {s: mean(evaluate(run, dataset.qrels, ["nDCG@10"]))["nDCG@10"] for s, run in runs.items()}
    tops = {s: {q: g.sort_values("rank")["doc_id"].tolist() for q, g in r.groupby("query_id")} for s, r in runs.items()}
    rankings = {q: (tops[SYSTEMS[0]][q], tops[SYSTEMS[1]].get(q, [])) for q in tops[SYSTEMS[0]]}
    grades = house_grades(dataset.qrels)
    rows = []
    for spec in MODELS:
        sim = simulate(rankings, grades, parse_click_model(spec), args.users, seed=args.seed)
        sizes = queries_to_detect(sim, seed=args.seed)
        rows.append(
            {
                "clicks": spec,
                "outcome": outcome(sim.credits).as_dict(),
                "ctr": sim.ctr(),
                "queries_interleaving": sizes["interleaving"]["queries"],
                "queries_ab_ctr": sizes["ab_ctr"]["queries"],
                "ab_prefers": sizes["ab_ctr"]["prefers"],
                "ratio": sizes["ratio"],
            }
        )
        print(rows[-1])
    write_json(
        args.output,
        {
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "dataset": f"{dataset.name} ({len(dataset.queries)} queries, {len(dataset.corpus)} documents)",
            "systems": {"A": SYSTEMS[0], "B": SYSTEMS[1]},
            "ndcg@10": ndcg,
            "users": args.users,
            "seed": args.seed,
            "models": rows,
        },
    )
    print(f"written: {args.output}")


if __name__ == "__main__":
    main()
