"""Write an evaluation's results: metrics.json, per_query.parquet, runs/<system>.trec, report.md.

Pure functions over plain data; the flow decides where and when. Every file is written
atomically, so an interrupted evaluation never leaves a half-written result beside good ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from tasks.atomic import atomic_open, atomic_path, write_json
from tasks.config import irflow_version
from tasks.runs import write_trec
from tasks.schema import Dataset
from tasks.systems import as_spec


@dataclass(frozen=True)
class SystemEvaluation:
    """What one system produced on a dataset: its run, per-query values and costs."""

    system: str
    run: pd.DataFrame
    per_query: pd.DataFrame  # query_id, measure, value
    means: dict[str, float]
    cost: dict[str, Any] = field(default_factory=dict)


def dataset_summary(dataset: Dataset) -> dict[str, Any]:
    m = dataset.manifest
    return {"name": dataset.name, "split": dataset.split, "fingerprint": dataset.fingerprint,
            "documents": m.get("documents"), "queries": m.get("queries"), "judgements": m.get("judgements"),
            "grades": m.get("grades")}


def metrics_document(dataset: Dataset, evaluations: list[SystemEvaluation], measures: list[str],
                     depth: int) -> dict[str, Any]:
    """The content of metrics.json: ``{"dataset": {...}, "systems": {SPEC: {METRIC: value}}, ...}``."""
    return {
        "dataset": dataset_summary(dataset),
        "systems": {e.system: {m: e.means[m] for m in measures} for e in evaluations},
        "cost": {e.system: e.cost for e in evaluations},
        "measures": measures,
        "depth": depth,
        "irflow_version": irflow_version(),
    }


def per_query_table(evaluations: list[SystemEvaluation]) -> pd.DataFrame:
    """All systems' per-query values: ``system``, ``query_id``, ``metric``, ``value``."""
    frames = [e.per_query.rename(columns={"measure": "metric"}).assign(system=e.system) for e in evaluations]
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["system", "query_id", "metric", "value"])
    return table[["system", "query_id", "metric", "value"]].astype({"system": "str", "query_id": "str",
                                                                     "metric": "str", "value": "float64"})


def markdown_report(document: dict[str, Any]) -> str:
    """A short human summary: the dataset and one row per system."""
    ds = document["dataset"]
    measures = document["measures"]
    lines = [f"# Evaluation of {ds['name']} ({ds['split']})", "",
             f"{ds['documents']:,} documents, {ds['queries']:,} judged queries, {ds['judgements']:,} judgements; "
             f"fingerprint `{ds['fingerprint'][:16]}`; depth {document['depth']}.", "",
             "| system | " + " | ".join(measures) + " | p95 ms |",
             "|---|" + "---:|" * (len(measures) + 1)]
    best = {m: max(v[m] for v in document["systems"].values()) for m in measures} if document["systems"] else {}
    for system, values in document["systems"].items():
        cells = [(f"**{values[m]:.4f}**" if values[m] == best[m] else f"{values[m]:.4f}") for m in measures]
        p95 = document["cost"].get(system, {}).get("p95_ms")
        lines.append(f"| `{system}` | " + " | ".join(cells) + f" | {p95:.1f} |" if p95 is not None else
                     f"| `{system}` | " + " | ".join(cells) + " | - |")
    lines += ["", "Best value per metric in bold. Means over all judged queries; a query a system did not "
              "answer scores 0 (as `trec_eval -c`).", ""]
    return "\n".join(lines)


def write_outputs(output: str | Path, dataset: Dataset, evaluations: list[SystemEvaluation],
                  measures: list[str], depth: int) -> dict[str, Any]:
    """Write every result file into ``output``; returns the metrics document."""
    output = Path(output)
    document = metrics_document(dataset, evaluations, measures, depth)
    for e in evaluations:
        write_trec(e.run, output / "runs" / f"{as_spec(e.system).slug}.trec", tag=e.system)
    with atomic_path(output / "per_query.parquet") as tmp:
        per_query_table(evaluations).to_parquet(tmp, index=False)
    write_json(output / "metrics.json", document)
    with atomic_open(output / "report.md", "w", encoding="utf-8") as fh:
        fh.write(markdown_report(document))
    return document


__all__ = ["SystemEvaluation", "markdown_report", "metrics_document", "per_query_table", "write_outputs"]
