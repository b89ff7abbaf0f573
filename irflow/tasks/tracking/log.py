"""Experiment tracking in MLflow: one evaluation logged as runs, and the public tracking API.

One evaluation (``log_evaluation``) becomes::

    evaluation run   irflow.kind=evaluation (nested under a suite or nightly run when given one)
      params     dataset.*, metrics, depth, baseline, systems, seeds, irflow.version, git.commit
      metrics    delta.<system>.<metric>, p.<system>.<metric> (against the baseline, corrected),
                 texts_encoded
      artifacts  metrics.json, per_query.parquet, significance.csv, report.md, runs/, plots/
      └── system run per system   irflow.kind=system
            params     system.*, model.* (name, identity = revision or weights hash), dense.*,
                       index.*, bm25.*, hybrid.*, rerank.*, dataset.*, depth, seeds, irflow.version
            metrics    every metric@k (``ndcg_at_10``), p50_ms / p95_ms / p99_ms, queries_per_second,
                       documents_per_second, index_build_seconds, retrieve_seconds
            tags       irflow.latency_error when its latency measurement failed (its metrics stand)
            artifacts  per_query.parquet, run.trec

and the experiment gets the run list's saved view ``irflow headline`` (``tracking_view``), which shows
the Dataset, ``best.<metric>``, the best system and the system runs' ``<metric>`` columns.

The rest lives beside it, and is re-exported here: the store, its credentials and the client in
``tracking_store``; the fail-fast write check in ``tracking_check``; params and metrics from plain
data in ``tracking_params``; reading runs back in ``tracking_read``.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.schema import IrflowError, MetricsDocument, RetrievalInfo
from irflow.tasks.core.stop import stop_requested
from irflow.tasks.systems.labels import labels_of
from irflow.tasks.systems.specs import as_spec, walk
from irflow.tasks.tracking.check import check_tracking
from irflow.tasks.tracking.params import (
    common_params,
    comparison_metrics,
    dataset_params,
    git_commit,
    metric_key,
    mlflow_key,
    system_metrics,
    system_params,
    texts_encoded,
)
from irflow.tasks.tracking.read import Snapshot, snapshot
from irflow.tasks.tracking.store import (
    DEFAULT_EXPERIMENT,
    KIND,
    Tracker,
    TrackingError,
    artifact_root,
    ending_runs,
    redact,
    tracking_uri,
)
from irflow.tasks.tracking.view import save_headline_view, view_url

RESULT_FILES = ("metrics.json", "per_query.parquet", "significance.csv", "report.md", "report.html")
RESULT_DIRS = ("runs", "plots")
EDITED_FILES = ("metrics.json", "report.md")  # uploaded as edited for MLflow (report.md's links; no tracking state)


class TrackingOptions(BaseModel):
    """How an evaluation is tracked: on or off, the MLflow experiment, a run to nest under, system labels."""

    enabled: bool = True
    experiment: str = DEFAULT_EXPERIMENT
    parent_run_id: str | None = Field(None, description="nest the evaluation run under this MLflow run (suites)")
    labels: dict[str, str] = Field(default_factory=dict, description="system spec -> label used as the run name")
    run_name: str | None = Field(None, description="the evaluation's name (default: dataset and split)")
    started_ms: int | None = Field(None, description="when the evaluation began (ms since the epoch; default: now)")


@dataclass(frozen=True)
class LoggedEvaluation:
    """The MLflow runs of one evaluation: the evaluation run and one run per system (label -> id);
    with a server, the run's UI page and the run list with the ``irflow headline`` view open."""

    run_id: str
    systems: dict[str, str]
    url: str | None = None
    runs_url: str | None = None


def log_evaluation(
    tracker: Tracker,
    output: str | Path,
    *,
    infos: Mapping[str, RetrievalInfo] | None = None,
    labels: Mapping[str, str] | None = None,
    failed: Mapping[str, str] | None = None,
    parent: str | None = None,
    tags: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
    seeds: Mapping[str, int] | None = None,
    encode_rates: Mapping[str, float] | None = None,
    run_name: str | None = None,
    start_time: int | None = None,
) -> LoggedEvaluation:
    """Log the result folder ``output`` (written by the report stage) as an evaluation run with a
    child run per system; a system in ``failed`` (spec -> error) gets a FAILED child run.

    ``infos`` are the retrievals' info trees (resolved index parameters, model identities, encode
    counts); ``labels`` name systems (spec -> label; default the folder's labels, else each system's default
    label: ``dense:all-MiniLM-L6-v2``): a child run is named by its system's label, its tags ``irflow.label``
    and ``irflow.spec`` (and ``irflow.system``, the spec too) and its param ``system.spec``; ``tags`` (e.g. the Prefect
    flow run) go on every run; ``encode_rates`` (dense spec -> documents/s measured by this run's
    embed stage) fill in ``documents_per_second`` where latency was not measured. ``run_name`` names
    the evaluation run (default ``<dataset> (<split>)``); ``start_time`` (ms since the epoch, when the
    flow began) makes its duration the evaluation's, not the logging's.
    """
    output = Path(output)
    document: MetricsDocument = json.loads((output / "metrics.json").read_text(encoding="utf-8"))
    document.pop(TRACKING, None)  # type: ignore[misc]  # an earlier attempt's state: this one says its own
    per_query = pd.read_parquet(output / "per_query.parquet")
    significance = output / "significance.csv"
    comparisons = pd.read_csv(significance) if significance.is_file() else pd.DataFrame()
    infos, failed = dict(infos or {}), dict(failed or {})
    dataset = document["dataset"]
    systems = list(dict.fromkeys(per_query["system"])) or list(document["systems"])
    given: dict[str, str] = {**dict(document.get("labels") or {}), **(labels or {})}  # type: ignore[call-overload]
    labels = labels_of([*systems, *failed], given)
    base = {**dataset_params(dataset), **common_params(seeds), "depth": document.get("depth")}
    tags = {"irflow.dataset": dataset["name"], **(tags or {})}

    with (
        tracking_state(output, document, tracker),  # metrics.json says tracking is unfinished until it is done
        ending_runs(),  # an error or SIGTERM while logging ends the runs FAILED or KILLED, never RUNNING
    ):
        name = run_name or f"{dataset['name']} ({dataset['split']})"
        run_id = tracker.start(name, "evaluation", parent=parent, tags=tags, start_time=start_time)
        encoded = sum(texts_encoded(i) for i in infos.values())
        tracker.log(
            run_id,
            params={
                **base,
                "metrics": document.get("measures", []),
                "systems": systems + list(failed),
                "baseline": document.get("baseline"),
                **(params or {}),
            },
            metrics={
                **(comparison_metrics(comparisons, labels) if len(comparisons) else {}),
                "texts_encoded": float(encoded),
                "systems_failed": float(len(failed)),
                **(metrics or {}),
            },
            tags={"irflow.failed_systems": json.dumps(failed) if failed else None},
        )
        tracker.log(run_id, **headline(document, labels))
        if document.get("measures"):
            save_headline_view(tracker, metric_key(document["measures"][0]))
        tracker.log_files(run_id, output, [f for f in RESULT_FILES if f not in EDITED_FILES], RESULT_DIRS)
        with tempfile.TemporaryDirectory(prefix="irflow-report-") as tmp:
            write_json(Path(tmp) / "metrics.json", document)  # as the report wrote it, without the tracking state
            if (output / "report.md").is_file():
                text = (output / "report.md").read_text(encoding="utf-8")
                (Path(tmp) / "report.md").write_text(artifact_links(text, run_id), encoding="utf-8")
            tracker.log_files(run_id, tmp, EDITED_FILES)
        log_dataset_input(tracker, run_id, dataset)

        children: dict[str, str] = {}
        with tempfile.TemporaryDirectory(prefix="irflow-track-") as tmp:
            for system in systems:
                label = labels[system]
                child = tracker.start(label, "system", parent=run_id, tags={**tags, **system_tags(system, label)})
                cost = dict(document.get("cost", {}).get(system) or {})
                latency_error = str(cost.get("latency_error") or "")[:5000] or None
                rates = [r for leaf in walk(as_spec(system)) if (r := (encode_rates or {}).get(str(leaf)))]
                if rates and not cost.get("documents_per_second"):
                    cost["documents_per_second"] = min(rates)
                tracker.log(
                    child,
                    params={**base, **system_params(system, infos.get(system), label)},
                    metrics={
                        **system_metrics(document["systems"].get(system, {}), cost),
                        **calibrated_metrics(document.get("calibrated", {}).get(system, {})),
                    },
                    tags={"irflow.latency_error": latency_error},
                )
                folder = Path(tmp) / str(len(children))
                folder.mkdir()
                per_query[per_query["system"] == system].to_parquet(folder / "per_query.parquet", index=False)
                trec = output / "runs" / f"{as_spec(system).slug}.trec"
                if trec.is_file():
                    shutil.copyfile(trec, folder / "run.trec")
                tracker.log_files(child, folder, ("per_query.parquet", "run.trec"))
                log_dataset_input(tracker, child, dataset)
                tracker.end(child)
                children[label] = child
            for system, error in failed.items():
                label = labels[system]
                child = tracker.start(
                    label,
                    "system",
                    parent=run_id,
                    tags={**tags, **system_tags(system, label), "irflow.error": error[:5000]},
                )
                try:
                    extra = system_params(system, None, label)
                except IrflowError:
                    extra = {"system.spec": system}
                tracker.log(child, params={**base, **extra})
                tracker.end(child, failed=True)
                children[label] = child
        tracker.end(run_id, failed=bool(failed))
    return LoggedEvaluation(run_id, children, tracker.run_url(run_id), view_url(tracker))


def system_tags(system: str, label: str) -> dict[str, str]:
    """A system's child run's tags: its label (the run's name) and its full spec, one click away."""
    return {"irflow.system": system, "irflow.spec": system, "irflow.label": label}


TRACKING = "tracking"
"""metrics.json's key for tracking that began and did not finish: ``{"status": "unfinished" | "failed" |
"stopped", "experiment", "store", "error"?}``. A folder whose tracking finished has ``mlflow`` instead (the
runs), one never tracked has neither: no folder claims runs that were not finished."""


@contextlib.contextmanager
def tracking_state(output: Path, document: Mapping[str, Any], tracker: Tracker) -> Iterator[None]:
    """While the block logs the folder ``output``, its metrics.json says so (``tracking``: ``unfinished``):
    a process killed meanwhile (SIGKILL) leaves that, not a folder that reads as never tracked. An error
    leaves ``failed`` and its reason, a stop ``stopped``; once the block is done, metrics.json is the
    report's ``document`` again (the caller adds ``mlflow``, naming the runs)."""
    where = {"experiment": tracker.experiment, "store": redact(tracker.uri)}
    target = output / "metrics.json"
    write_json(target, {**document, TRACKING: {"status": "unfinished", **where}})
    try:
        yield
    except BaseException as exc:
        failed = isinstance(exc, Exception) and not stop_requested()
        state = {"status": "failed", "error": redact(f"{type(exc).__name__}: {exc}")[:2000]} if failed else {}
        with contextlib.suppress(OSError):  # the disk that failed the logging may fail this too
            write_json(target, {**document, TRACKING: {"status": "stopped", **state, **where}})
        raise
    write_json(target, dict(document))


def calibrated_metrics(blocks: Mapping[str, Any]) -> dict[str, float]:
    """A system's calibrated means (``irflow run --human``) as MLflow metrics ``calibrated.<metric key>``,
    with their interval as ``calibrated.<metric key>.low`` and ``.high``."""
    out: dict[str, float] = {}
    for metric, block in blocks.items():
        key = f"calibrated.{metric_key(metric)}"
        out |= {key: block["estimate"], f"{key}.low": block["ci"][0], f"{key}.high": block["ci"][1]}
    return out


def artifact_links(markdown: str, run_id: str) -> str:
    """report.md for MLflow's artifact viewer: relative image links (``plots/x.png``) pointed at the
    run's artifacts as the UI serves them (``get-artifact?path=...&run_uuid=...``, relative to the
    server's root), since the viewer resolves links against its own page. The result folder keeps
    the relative links, which editors and Git hosts render."""
    from urllib.parse import quote

    def point(match: re.Match[str]) -> str:
        return f"{match[1]}(get-artifact?path={quote(match[2], safe='')}&run_uuid={run_id})"

    return re.sub(r"(!\[[^\]]*\])\((?![a-zA-Z][a-zA-Z0-9+.-]*:|/|#)([^)\s]+)\)", point, markdown)


def headline(document: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The evaluation's headline for MLflow's run list: ``best.<metric>`` (the first metric's best
    system value) as a metric and the best system's label as the tag ``irflow.best_system``."""
    measures, systems = document.get("measures") or [], document.get("systems") or {}
    scored = {s: v[measures[0]] for s, v in systems.items() if measures and measures[0] in v}
    if not scored:
        return {}
    best = max(scored, key=lambda s: scored[s])
    return {
        "metrics": {f"best.{metric_key(measures[0])}": float(scored[best])},
        "tags": {"irflow.best_system": labels.get(best, best)},
    }


def log_dataset_input(tracker: Tracker, run_id: str, dataset: Mapping[str, Any]) -> None:
    """Log the dataset as an MLflow dataset input (the run list's Dataset column, lineage): named
    ``<name> (<split>)``, digest = irflow's fingerprint (its first 36 hex digits, MLflow's limit),
    the full fingerprint and counts in the profile."""
    from mlflow.entities import Dataset as MlflowDataset
    from mlflow.entities import DatasetInput, InputTag

    fingerprint = str(dataset.get("fingerprint") or "unknown")
    entity = MlflowDataset(
        name=f"{dataset['name']} ({dataset['split']})",
        digest=fingerprint[:36],
        source_type="irflow",
        source=json.dumps({"dataset": dataset["name"], "split": dataset["split"], "fingerprint": fingerprint}),
        profile=json.dumps({k: dataset.get(k) for k in ("fingerprint", "documents", "queries", "judgements")}),
    )
    tags = [InputTag(key="mlflow.data.context", value="evaluation")]
    tracker.client.log_inputs(run_id, datasets=[DatasetInput(dataset=entity, tags=tags)])


__all__ = [
    "DEFAULT_EXPERIMENT",
    "artifact_links",
    "KIND",
    "LoggedEvaluation",
    "Snapshot",
    "Tracker",
    "TrackingError",
    "TrackingOptions",
    "artifact_root",
    "check_tracking",
    "comparison_metrics",
    "ending_runs",
    "dataset_params",
    "git_commit",
    "headline",
    "log_dataset_input",
    "log_evaluation",
    "metric_key",
    "mlflow_key",
    "redact",
    "save_headline_view",
    "snapshot",
    "system_metrics",
    "system_params",
    "system_tags",
    "texts_encoded",
    "tracking_state",
    "tracking_uri",
    "view_url",
]
