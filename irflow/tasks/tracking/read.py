"""Tracked evaluations read back from MLflow: per-query values and params of suite, nightly,
evaluation and system runs, for ``irflow compare`` and the nightly regression check."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

import pandas as pd

from irflow.tasks.tracking.store import KIND, Tracker, TrackingError, error_text, redact


@dataclass(frozen=True)
class Snapshot:
    """Tracked per-query values (``dataset, system, query_id, metric, value``; system = label) and
    the params of each (dataset, label), read back from MLflow."""

    per_query: pd.DataFrame
    params: dict[tuple[str, str], dict[str, str]]

    @property
    def keys(self) -> list[tuple[str, str]]:
        return list(self.params)


def snapshot(tracker: Tracker, run_id: str) -> Snapshot:
    """Read a suite/nightly, evaluation or system run (and what is nested under it) back from MLflow."""
    try:
        run = tracker.client.get_run(run_id)
    except Exception as err:
        raise TrackingError(f"no MLflow run {run_id!r} in {redact(tracker.uri)}: {error_text(err)}") from None
    kind = run.data.tags.get(KIND)
    if kind in ("suite", "nightly"):
        parts = [_evaluation_snapshot(tracker, r) for r in tracker.children(run, "evaluation")]
    elif kind == "evaluation":
        parts = [_evaluation_snapshot(tracker, run)]
    elif kind == "system":
        parts = [_system_snapshot(tracker, run)]
    else:
        raise TrackingError(f"MLflow run {run_id} was not logged by irflow (no {KIND} tag)")
    frames = [p.per_query for p in parts if len(p.per_query)]
    per_query = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=["dataset", "system", "query_id", "metric", "value"])
    )
    return Snapshot(per_query, {k: v for p in parts for k, v in p.params.items()})


def _per_query(tracker: Tracker, run_id: str) -> pd.DataFrame:
    with tempfile.TemporaryDirectory(prefix="irflow-read-") as tmp:
        try:
            return pd.read_parquet(tracker.download(run_id, "per_query.parquet", tmp))
        except Exception:  # a failed system has no values
            return pd.DataFrame(columns=["system", "query_id", "metric", "value"])


def resolve_run(tracker: Tracker, ref: str) -> str:
    """The MLflow run id ``ref`` stands for: a result folder (its metrics.json names its run), a run id,
    or a run name of this experiment (irflow's readable names, e.g. ``techdocs_bm25_20261124-070812``)."""
    import json
    from pathlib import Path

    folder = Path(ref)
    if folder.is_dir():
        try:
            document = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise TrackingError(f"{ref}: not a result folder (metrics.json unreadable: {err})") from None
        run_id = (document.get("mlflow") or {}).get("run_id")
        if not run_id:
            raise TrackingError(f"{ref}: the run was not tracked in MLflow (metrics.json has no mlflow.run_id)")
        return str(run_id)
    escaped = ref.replace("\\", "\\\\").replace("'", "\\'")
    named = tracker.search(f"attributes.run_name = '{escaped}'", max_results=10)
    if len(named) > 1:
        ids = ", ".join(r.info.run_id for r in named)
        raise TrackingError(f"{ref!r} names {len(named)} MLflow runs of {tracker.experiment!r} ({ids}); pass an id")
    if named:
        return str(named[0].info.run_id)
    try:
        return str(tracker.client.get_run(ref).info.run_id)
    except Exception:
        raise TrackingError(
            f"{ref!r} is neither a result folder, nor a run name of experiment {tracker.experiment!r}, "
            f"nor an MLflow run id in {redact(tracker.uri)}"
        ) from None


def _evaluation_snapshot(tracker: Tracker, run: Any) -> Snapshot:
    dataset = run.data.tags.get("irflow.dataset") or run.data.params.get("dataset.name", "?")
    systems = tracker.children(run, "system")
    labels = {r.data.tags.get("irflow.system"): r.data.tags.get("irflow.label") for r in systems}
    table = _per_query(tracker, run.info.run_id)
    table = table.assign(dataset=dataset, system=table["system"].map(lambda s: labels.get(s) or s))
    params = {(dataset, r.data.tags.get("irflow.label")): {**run.data.params, **r.data.params} for r in systems}
    return Snapshot(table[["dataset", "system", "query_id", "metric", "value"]], params)


def _system_snapshot(tracker: Tracker, run: Any) -> Snapshot:
    dataset = run.data.tags.get("irflow.dataset") or run.data.params.get("dataset.name", "?")
    label = run.data.tags.get("irflow.label") or run.data.params.get("system.spec", "?")
    table = _per_query(tracker, run.info.run_id).assign(dataset=dataset, system=label)
    return Snapshot(
        table[["dataset", "system", "query_id", "metric", "value"]], {(dataset, label): dict(run.data.params)}
    )


__all__ = ["Snapshot", "resolve_run", "snapshot"]
