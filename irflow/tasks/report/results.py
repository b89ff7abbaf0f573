"""Stored result folders: read one back, check that several are of the same dataset, combine them.

A result folder (written by :func:`irflow.tasks.report.write.write_outputs`) holds ``metrics.json``,
``per_query.parquet`` and ``runs/*.trec``; everything else in it is derived from those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.runs import read_trec
from irflow.tasks.core.schema import InputError
from irflow.tasks.systems.specs import as_spec


@dataclass(frozen=True)
class StoredResults:
    """A result folder's metrics document, per-query table and runs (keyed by system spec)."""

    document: dict[str, Any]
    per_query: pd.DataFrame
    runs: dict[str, pd.DataFrame]

    @property
    def systems(self) -> list[str]:
        """Systems in evaluation order (per_query.parquet keeps it; metrics.json's keys are sorted)."""
        return list(dict.fromkeys(self.per_query["system"]))

    @property
    def baseline(self) -> str:
        return str(self.document.get("baseline") or self.systems[0])


def load_results(run_dir: str | Path) -> StoredResults:
    """Read ``metrics.json``, ``per_query.parquet`` and ``runs/*.trec`` of a result folder."""
    import json

    run_dir = Path(run_dir)
    for name in ("metrics.json", "per_query.parquet"):
        if not (run_dir / name).is_file():
            raise InputError(
                f"not a result folder: {name} is missing (write one with `irflow run --output DIR`)", path=str(run_dir)
            )
    try:
        document = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
        per_query = pd.read_parquet(run_dir / "per_query.parquet")
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read results: {exc}", path=str(run_dir)) from None
    per_query = _checked_per_query(per_query, run_dir / "per_query.parquet")
    runs = {s: read_trec(run_dir / "runs" / f"{as_spec(s).slug}.trec") for s in dict.fromkeys(per_query["system"])}
    return StoredResults(document, per_query, runs)


def labelled_per_query(run_dir: str | Path) -> tuple[pd.DataFrame, dict[tuple[str, str], dict[str, str]]]:
    """A result folder's per-query values as MLflow's runs hold them (``dataset, system, query_id, metric,
    value``; system = its label, as :func:`~irflow.tasks.systems.labels.labels_of` gives it), and per
    ``(dataset, label)`` the params known without MLflow (``system.spec``): an untracked run, comparable
    with a tracked one."""
    from irflow.tasks.systems.labels import labels_of

    stored = load_results(run_dir)
    name = str(stored.document["dataset"]["name"])
    systems = list(dict.fromkeys(stored.per_query["system"]))
    labels = labels_of(systems, stored.document.get("labels"))
    table = stored.per_query.assign(dataset=name, system=stored.per_query["system"].map(lambda s: labels.get(s, s)))
    params = {(name, labels.get(s, s)): {"system.spec": s} for s in systems}
    return table[["dataset", "system", "query_id", "metric", "value"]], params


PER_QUERY_COLUMNS = {"system": "str", "query_id": "str", "metric": "str", "value": "float64"}


def _checked_per_query(table: pd.DataFrame, path: Path) -> pd.DataFrame:
    """``per_query.parquet`` with its columns typed; InputError naming the file, the column and the first
    query whose value is missing, NaN or infinite (a report of means over NaN would be silently wrong)."""
    missing = [c for c in PER_QUERY_COLUMNS if c not in table.columns]
    if missing:
        raise InputError(
            f"missing column(s) {', '.join(missing)}; expected {', '.join(PER_QUERY_COLUMNS)}", path=str(path)
        )
    for column in ("system", "query_id", "metric"):
        if table[column].isna().any():
            raise InputError(
                f"column {column!r} is empty in row {int(table[column].isna().to_numpy().argmax()) + 1:,}; "
                "expected a value in every row",
                path=str(path),
            )
    try:
        table = table.astype(PER_QUERY_COLUMNS)
    except (TypeError, ValueError) as exc:
        raise InputError(f"column 'value' is not numeric ({exc})", path=str(path)) from None
    bad = ~np.isfinite(table["value"].to_numpy())
    if bad.any():
        row = table[bad].iloc[0]
        raise InputError(
            f"column 'value' holds {row['value']} for query {row['query_id']!r} (system {row['system']!r}, metric "
            f"{row['metric']!r}) and {int(bad.sum()) - 1:,} more; expected finite per-query values",
            path=str(path),
        )
    return table


def check_same_dataset(documents: Sequence[Mapping[str, Any]]) -> None:
    """Raise InputError unless every metrics document describes the same dataset (by fingerprint)."""
    seen: dict[str, str] = {}
    for doc in documents:
        ds = doc.get("dataset", {})
        fingerprint = str(ds.get("fingerprint"))
        label = f"{ds.get('name')} ({ds.get('split')})"
        if seen and fingerprint not in seen:
            ((first, first_label),) = list(seen.items())[:1]
            raise InputError(
                f"cannot compare runs over different datasets: {first_label} has fingerprint "
                f"{first} but {label} has fingerprint {fingerprint}"
            )
        seen.setdefault(fingerprint, label)


def combine_results(results: Sequence[StoredResults], labels: Sequence[str] | None = None) -> StoredResults:
    """Merge result folders of the same dataset into one, e.g. last night's run beside tonight's.

    With ``labels`` every system is renamed ``<label>/<system>`` (so the same spec can appear in two
    folders); without, a system present twice is an error. The first folder's baseline stays the
    baseline; only metrics present in every folder are kept.
    """
    if not results:
        raise InputError("nothing to combine")
    check_same_dataset([r.document for r in results])
    if labels is not None and len(labels) != len(results):
        raise InputError(f"{len(labels)} labels for {len(results)} result folders")
    prefixes = [f"{label}/" for label in labels] if labels is not None else [""] * len(results)
    measures = [m for m in results[0].document["measures"] if all(m in r.document["measures"] for r in results)]
    frames, runs, systems, cost = [], {}, {}, {}
    for r, prefix in zip(results, prefixes):
        for s in r.systems:
            name = prefix + s
            if name in runs:
                raise InputError(f"system {name!r} appears in two result folders; pass labels to tell them apart")
            runs[name] = r.runs[s]
            systems[name] = {m: r.document["systems"][s][m] for m in measures}
            cost[name] = r.document.get("cost", {}).get(s, {})
        frames.append(r.per_query[r.per_query["metric"].isin(measures)].assign(system=prefix + r.per_query["system"]))
    document = {
        **results[0].document,
        "systems": systems,
        "cost": cost,
        "measures": measures,
        "baseline": prefixes[0] + results[0].baseline,
    }
    return StoredResults(document, pd.concat(frames, ignore_index=True), runs)
