"""zELO annotation of techdocs with an offline ensemble, against the dataset's human grades.

Candidates: the top K (default 20) of ``hybrid:bm25+dense:minilm`` for every query, so neither
benchmarked system picks the pool alone. Judges: ``model:minilm`` (bi-encoder cosine) and
``system:bm25`` — local, free, deterministic. Reported:

* each judge's and the ensemble's agreement with the human grades on battles between two
  differently graded documents (ties ½), for both ensemble rules (vote, mean);
* the zELO ranking's pairwise accuracy / nDCG against the human grades over the candidates;
* BM25, dense and hybrid benchmarked against the zELO annotation and against the human grades.

Caveat printed with the figures: the two judges *are* the BM25 and dense models, so benchmarking
those systems against this annotation is circular; the human-grade columns are the check.

    python benchmarks/bench_annotate.py [--k 20] [--queries N] [--output benchmarks/results/annotate.json]

Writes the JSON atomically; the annotation itself goes to a temporary folder (or ``--workdir``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from irflow.tasks.annotate import ensemble, pipeline  # noqa: E402
from irflow.tasks.core.atomic import write_json  # noqa: E402

SYSTEMS = ("bm25", "dense:minilm", "hybrid:bm25+dense:minilm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--queries", type=int)
    parser.add_argument("--candidates", default="hybrid:bm25+dense:minilm")
    parser.add_argument("--workdir", type=Path, help="annotation folder (default: a temporary one)")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "annotate.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.workdir or Path(tmp) / "annotation"
        config = pipeline.AnnotateConfig(
            dataset="techdocs",
            output=str(folder),
            system=args.candidates,
            k=args.k,
            queries=args.queries,
            benchmark=SYSTEMS,
        )
        start = time.perf_counter()
        p = pipeline.plan(config)
        stats = pipeline.judge(p)
        annotation = pipeline.fit(p)
        summary = pipeline.write_outputs(p, annotation, stats)
        seconds = time.perf_counter() - start
        # the other ensemble rule, on the same votes
        mean_plan = dataclasses.replace(p, config=dataclasses.replace(config, ensemble="mean"))
        mean = pipeline.fit(mean_plan)
        names = [j.name for j in p.judges]
        mean_agreement = ensemble.agreement_with_grades(mean.combined, p.dataset.qrels, names)["ensemble"]
        mean_zelo = pipeline.human_agreement(mean_plan, mean)["zelo_vs_grades"]

    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "python benchmarks/bench_annotate.py" + "".join(f" {a}" for a in sys.argv[1:]),
        "dataset": summary["dataset"],
        "candidates": summary["candidates"],
        "pairs": summary["pairs"],
        "judges": list(summary["judges"]),
        "votes": summary["votes"],
        "seconds": round(seconds, 1),
        "bradley_terry": summary["bradley_terry"],
        "inter_judge_agreement": summary["inter_judge_agreement"],
        "agreement_with_human_grades": {
            "battles (vote ensemble)": summary["human_grades"]["battles"],
            "ensemble (mean rule)": mean_agreement,
        },
        "zelo_vs_human_grades": {"vote": summary["human_grades"]["zelo_vs_grades"], "mean": mean_zelo},
        "benchmarks": summary["benchmarks"],
        "grades_from_zelo": summary["grades"],
        "caveat": "the judges are the BM25 and MiniLM models themselves: benchmarking bm25 / dense against this "
        "annotation is circular; compare with the vs_grades (human) figures",
    }
    write_json(args.output, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
