"""A RAG evaluation in MLflow: an evaluation run with a child run per configuration.

The evaluation run holds the result folder (metrics.json, per_query.parquet, failures.csv, answers.jsonl,
significance.csv, report.md and report.html), the dataset, the configurations and the paired tests'
deltas and p-values; each configuration's child run its means, CI bounds, failed samples, judge noise
and its per-query rows. Answers and reports pass through the result folder, already redacted.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.systems.labels import labels_of
from irflow.tasks.tracking.log import LoggedEvaluation, log_dataset_input, system_tags
from irflow.tasks.tracking.params import common_params, dataset_params, mlflow_key
from irflow.tasks.tracking.store import Tracker, ending_runs
from irflow.tasks.tracking.view import view_url

RAG_FILES = (
    "metrics.json",
    "per_query.parquet",
    "failures.csv",
    "answers.jsonl",
    "significance.csv",
    "report.md",
    "report.html",
)


def log_rag(
    tracker: Tracker,
    output: str | Path,
    *,
    run_name: str,
    tags: Mapping[str, Any] | None = None,
    seed: int = 0,
    start_time: int | None = None,
) -> LoggedEvaluation:
    """Log the RAG result folder ``output``: the evaluation run, then one child run per configuration."""
    output = Path(output)
    document = json.loads((output / "metrics.json").read_text(encoding="utf-8"))
    per_query = pd.read_parquet(output / "per_query.parquet")
    comparisons = pd.read_csv(output / "significance.csv") if (output / "significance.csv").stat().st_size else None
    dataset = document["dataset"]
    base = {**dataset_params(dataset), **common_params({"seed.significance": seed})}
    tags = {"irflow.dataset": dataset["name"], "irflow.evaluation": "rag", **(tags or {})}
    usage = document.get("usage") or {}
    with ending_runs():
        run_id = tracker.start(run_name, "evaluation", tags=tags, start_time=start_time)
        metrics: dict[str, float] = {}
        for stage, u in usage.items():
            metrics |= {mlflow_key(stage, k): float(u[k]) for k in ("calls", "cached", "failed", "usd")}
            metrics[mlflow_key(stage, "tokens")] = float(u["prompt_tokens"] + u["completion_tokens"])
        for row in [] if comparisons is None else comparisons.to_dict("records"):
            key = (row["candidate"], row["metric"])
            metrics[mlflow_key("delta", *key)] = float(row["delta"])
            metrics[mlflow_key("p_adjusted", *key)] = float(row["p_adjusted"])
        tracker.log(
            run_id,
            params={
                **base,
                "metrics": document["measures"],
                "systems": list(document["configurations"]),
                "baseline": document["baseline"],
                **{mlflow_key("option", k): v for k, v in (document.get("options") or {}).items()},
            },
            metrics=metrics,
        )
        tracker.log_files(run_id, output, RAG_FILES)
        log_dataset_input(tracker, run_id, dataset)
        children: dict[str, str] = {}
        with tempfile.TemporaryDirectory(prefix="irflow-track-rag-") as tmp:
            labels = labels_of(list(document["configurations"]))  # a spec's label; an answers file's name as is
            for name, identity in document["configurations"].items():
                label = labels[name]
                child = tracker.start(label, "system", parent=run_id, tags={**tags, **system_tags(name, label)})
                values: dict[str, float] = {}
                for metric, row in document["summary"].get(name, {}).items():
                    for field in ("mean", "ci_low", "ci_high", "n", "failed", "repeat_sd"):
                        if row.get(field) is not None:
                            values[mlflow_key(metric, "" if field == "mean" else field).rstrip("._")] = float(
                                row[field]
                            )
                tracker.log(
                    child,
                    params={**base, "system.spec": name, **{mlflow_key("config", k): v for k, v in identity.items()}},
                    metrics=values,
                )
                folder = Path(tmp) / str(len(children))
                folder.mkdir()
                per_query[per_query["system"] == name].to_parquet(folder / "per_query.parquet", index=False)
                tracker.log_files(child, folder, ("per_query.parquet",))
                tracker.end(child)
                children[label] = child
        tracker.end(run_id)
    return LoggedEvaluation(run_id, children, tracker.run_url(run_id), view_url(tracker))
