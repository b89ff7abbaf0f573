"""Experiment tracking in MLflow: where runs go, what they record, and reading them back.

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
            artifacts  per_query.parquet, run.trec

The store is ``MLFLOW_TRACKING_URI`` or ``sqlite:///<working directory>/mlruns/mlflow.db`` with artifacts in
``mlruns/artifacts``. An unreachable store fails at once naming its URI: there is no silent
fallback. mlflow is imported inside functions (``import mlflow`` costs seconds).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

from irflow.tasks.config import irflow_version, source_root
from irflow.tasks.metrics import parse_measure
from irflow.tasks.schema import IrflowError
from irflow.tasks.systems import BM25Spec, DenseSpec, HybridSpec, RerankSpec, SystemSpec, as_spec

DEFAULT_EXPERIMENT = "irflow"
DEFAULT_DB = Path("mlruns") / "mlflow.db"  # in the working directory, as MLflow itself defaults
KIND = "irflow.kind"  # tag: suite | nightly | evaluation | system
PARENT = "mlflow.parentRunId"
RESULT_FILES = ("metrics.json", "per_query.parquet", "significance.csv", "report.md")
RESULT_DIRS = ("runs", "plots")
COST_METRICS = (
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "mean_ms",
    "queries_per_second",
    "documents_per_second",
    "index_build_seconds",
    "retrieve_seconds",
    "prepare_seconds",
)
SEEDS = {"seed.significance": 0, "seed.latency": 0}  # the pipeline's defaults; flows override them


class TrackingError(IrflowError):
    """The tracking store cannot be reached or used; the message names its URI."""


class TrackingOptions(BaseModel):
    """How an evaluation is tracked: on or off, the MLflow experiment, a run to nest under, system labels."""

    enabled: bool = True
    experiment: str = DEFAULT_EXPERIMENT
    parent_run_id: str | None = Field(None, description="nest the evaluation run under this MLflow run (suites)")
    labels: dict[str, str] = Field(default_factory=dict, description="system spec -> label used as the run name")


# ---------------------------------------------------------------------------------------------
# where


def tracking_uri() -> str:
    """``MLFLOW_TRACKING_URI``, else the SQLite store ``mlruns/mlflow.db`` of the working directory
    (made absolute, so the URI names the same store whichever process reads it)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB.resolve()}"


def redact(uri: str) -> str:
    """The URI without a password (user:secret@host -> user:***@host): safe for logs and messages."""
    parts = urllib.parse.urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (relative paths are relative to the working directory)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///") :].split("?", 1)[0])


def artifact_root(uri: str) -> Path | None:
    """Where a local SQLite store keeps artifacts: ``artifacts/`` beside the database (None for servers)."""
    db = sqlite_path(uri)
    return None if db is None else db.resolve().parent / "artifacts"


def check_tracking(uri: str | None = None, timeout: float = 10.0) -> str:
    """Make sure the store answers (a server's /health, a database opens); returns the URI.

    Raises TrackingError naming the URI otherwise: nothing is logged anywhere else instead.
    """
    uri = uri or tracking_uri()
    scheme = urllib.parse.urlsplit(uri).scheme
    if scheme in ("http", "https"):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as response:
                response.read()
        except (OSError, urllib.error.URLError) as err:
            raise TrackingError(
                f"MLflow tracking server {redact(uri)} is unreachable ({_reason(err)}); start it "
                "(mlflow server --host 127.0.0.1 --port 5000 ...) or set MLFLOW_TRACKING_URI"
            ) from None
    db = sqlite_path(uri)
    try:
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
        _client(uri).search_experiments(max_results=1)
    except Exception as err:
        raise TrackingError(f"MLflow tracking store {redact(uri)} cannot be used: {_reason(err)}") from None
    return uri


def _reason(err: BaseException) -> str:
    reason = getattr(err, "reason", None) or err
    return f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason


def _client(uri: str) -> Any:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def git_commit(root: Path | None = None) -> str | None:
    """The checked-out commit of ``root`` (default: irflow's own source checkout, when it runs from one),
    read from ``.git`` (no git process), or None."""
    root = root or source_root()
    if root is None:
        return None
    git = root / ".git"
    try:
        if git.is_file():  # a worktree: "gitdir: <path>"
            git = (root / git.read_text().split(":", 1)[1].strip()).resolve()
        common = (git / (git / "commondir").read_text().strip()).resolve() if (git / "commondir").is_file() else git
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head if re.fullmatch(r"[0-9a-f]{40}", head) else None
        ref = head[5:]
        for base in (git, common):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
        packed = common / "packed-refs"
        for line in packed.read_text().splitlines() if packed.is_file() else []:
            sha, _, name = line.partition(" ")
            if name.strip() == ref:
                return sha
    except OSError:
        return None
    return None


# ---------------------------------------------------------------------------------------------
# what: params and metrics from plain data


def mlflow_key(*parts: str) -> str:
    """A metric/param name from free text: parts joined by '.', each reduced to ``[A-Za-z0-9_-]``.

    ``mlflow_key("delta", "dense:minilm", "ndcg_at_10") == "delta.dense_minilm.ndcg_at_10"``; names
    longer than MLflow's 250 characters keep a digest of the original.
    """
    key = ".".join(re.sub(r"[^\w\-]+", "_", str(p)).strip("_") or "_" for p in parts)
    if len(key) > 250:
        key = key[:230] + "-" + hashlib.sha256(key.encode()).hexdigest()[:16]
    return key


def metric_key(metric: str) -> str:
    """MLflow-safe key of a metric name: ``nDCG@10`` -> ``ndcg_at_10``."""
    return parse_measure(metric).key


def _leaves(spec: SystemSpec) -> Iterable[SystemSpec]:
    yield spec
    if isinstance(spec, HybridSpec):
        for member in spec.systems:
            yield from _leaves(member)
    elif isinstance(spec, RerankSpec):
        yield from _leaves(spec.first_stage)


def _infos(info: Mapping[str, Any] | None) -> Iterable[Mapping[str, Any]]:
    """Every node of a retrieval ``info`` tree (members of a hybrid, the first stage of a rerank)."""
    if not info:
        return
    yield info
    for member in (info.get("members") or {}).values():
        yield from _infos(member)
    if info.get("first_stage"):
        yield from _infos(info["first_stage"])


def model_identity(model: str) -> str:
    """``hf:<name>@<commit>`` or ``sha256:<weights and configs>`` of a model, "unresolved" if it cannot be found."""
    from irflow.tasks.embed import resolve_model

    try:
        return resolve_model(model).identity
    except (IrflowError, OSError):
        return "unresolved"


def system_params(system: str, info: Mapping[str, Any] | None = None, label: str | None = None) -> dict[str, Any]:
    """Everything a system's numbers depend on: its spec, models (with revision or weights hash),
    index type and parameters (as resolved when ``info`` from the retrieval is given), BM25 parameters."""
    spec = as_spec(system)
    params: dict[str, Any] = {"system.spec": str(spec), "system.kind": spec.kind, "system.label": label or str(spec)}
    resolved = {node["system"]: node for node in _infos(info) if "system" in node}
    seen: dict[str, int] = {}

    def put(prefix: str, values: dict[str, Any]) -> None:
        seen[prefix] = seen.get(prefix, 0) + 1
        suffix = "" if seen[prefix] == 1 else f".{seen[prefix]}"
        params.update({f"{k}{suffix}": v for k, v in values.items()})

    for leaf in _leaves(spec):
        if isinstance(leaf, BM25Spec):
            put(
                "bm25",
                {f"bm25.{k}": getattr(leaf, k) for k in ("k1", "b", "backend", "method", "stemmer", "stopwords")},
            )
        elif isinstance(leaf, DenseSpec):
            node = resolved.get(str(leaf), {})
            index = {
                f"index.{k.removeprefix('index_')}": v
                for k, v in node.items()
                if k.startswith("index_")
                and k
                not in ("index_build_seconds", "index_from_cache", "index_load_seconds", "index_cached", "index_path")
            }
            index.update({f"index.{k}": v for k, v in leaf.index_params})
            put(
                "dense",
                {
                    "model.name": leaf.model,
                    "model.identity": node.get("model_identity") or model_identity(leaf.model),
                    "dense.max_seq_length": leaf.max_seq_length or "model default",
                    "dense.query_prompt": json.dumps(node.get("query_prompt", leaf.query_prompt)),
                    "dense.doc_prompt": json.dumps(node.get("doc_prompt", leaf.doc_prompt)),
                    "dense.batch_size": leaf.batch_size,
                    "index.type": leaf.index,
                    **index,
                },
            )
        elif isinstance(leaf, HybridSpec):
            put(
                "hybrid",
                {
                    "hybrid.k": leaf.k,
                    "hybrid.weights": ":".join(f"{w:g}" for w in leaf.weights),
                    "hybrid.depth": leaf.depth or "max(depth, 100)",
                },
            )
        elif isinstance(leaf, RerankSpec):
            put(
                "rerank",
                {
                    "rerank.model": leaf.model,
                    "rerank.model_identity": model_identity(leaf.model),
                    "rerank.top": leaf.top,
                },
            )
    return params


def system_metrics(means: Mapping[str, float], cost: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Every metric under its MLflow key (``ndcg_at_10``) plus the numeric costs (latency, throughput)."""
    out = {metric_key(m): float(v) for m, v in means.items()}
    for key in COST_METRICS:
        value = (cost or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    return out


def texts_encoded(info: Mapping[str, Any] | None) -> int:
    """Documents plus queries a retrieval encoded itself (0 when every vector came from the cache)."""
    return sum(int(n.get("docs_encoded", 0)) + int(n.get("queries_encoded", 0)) for n in _infos(info))


def comparison_metrics(comparisons: pd.DataFrame, labels: Mapping[str, str] | None = None) -> dict[str, float]:
    """``delta.<system>.<metric>`` and ``p.<system>.<metric>`` (corrected) of each row of a significance table."""
    labels = labels or {}
    out: dict[str, float] = {}
    for row in comparisons.itertuples(index=False):
        name = labels.get(row.candidate, row.candidate)
        out[mlflow_key("delta", name, metric_key(row.metric))] = float(row.delta)
        p = getattr(row, "p_adjusted", None)
        out[mlflow_key("p", name, metric_key(row.metric))] = float(p if p is not None else row.p_randomization)
    return out


def dataset_params(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``dataset.name``, ``dataset.split``, ``dataset.fingerprint`` and the counts of a metrics.json dataset block."""
    return {
        f"dataset.{k}": summary.get(k) for k in ("name", "split", "fingerprint", "documents", "queries", "judgements")
    }


def common_params(seeds: Mapping[str, int] | None = None) -> dict[str, Any]:
    return {**SEEDS, **(seeds or {}), "irflow.version": irflow_version(), "git.commit": git_commit() or "unknown"}


# ---------------------------------------------------------------------------------------------
# how: a thin client


class Tracker:
    """An MLflow client bound to one store and experiment (created on first use)."""

    def __init__(self, experiment: str = DEFAULT_EXPERIMENT, uri: str | None = None) -> None:
        self.uri = uri or tracking_uri()
        self.experiment = experiment
        self.client = _client(self.uri)
        self._experiment_id: str | None = None

    @property
    def experiment_id(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment)
            if found is not None:
                self._experiment_id = found.experiment_id
            else:
                root = artifact_root(self.uri)
                location = (root / mlflow_key(self.experiment)).as_uri() if root else None
                try:
                    self._experiment_id = self.client.create_experiment(self.experiment, artifact_location=location)
                except Exception:  # created concurrently by another process
                    self._experiment_id = self.client.get_experiment_by_name(self.experiment).experiment_id
        return self._experiment_id

    def start(self, name: str, kind: str, *, parent: str | None = None, tags: Mapping[str, Any] | None = None) -> str:
        """Create a run (status RUNNING) and return its id."""
        all_tags = {KIND: kind, **{k: str(v) for k, v in (tags or {}).items() if v is not None}}
        if parent:
            all_tags[PARENT] = parent
        return self.client.create_run(self.experiment_id, tags=all_tags, run_name=name).info.run_id

    def log(
        self,
        run_id: str,
        *,
        params: Mapping[str, Any] | None = None,
        metrics: Mapping[str, float] | None = None,
        tags: Mapping[str, Any] | None = None,
    ) -> None:
        """Log params (values as text, at most 6000 characters), finite metrics and tags in batches."""
        from mlflow.entities import Metric, Param, RunTag

        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id,
            metrics=[Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if math.isfinite(float(v))],
            params=[Param(k, _text(v)[:6000]) for k, v in (params or {}).items()],
            tags=[RunTag(k, _text(v)) for k, v in (tags or {}).items() if v is not None],
        )

    def log_files(
        self,
        run_id: str,
        folder: str | Path,
        files: Iterable[str] = (),
        dirs: Iterable[str] = (),
        artifact_path: str | None = None,
    ) -> None:
        """Upload the named files and folders of ``folder`` (those that exist)."""
        folder = Path(folder)
        for name in files:
            if (folder / name).is_file():
                self.client.log_artifact(run_id, str(folder / name), artifact_path)
        for name in dirs:
            if (folder / name).is_dir():
                self.client.log_artifacts(
                    run_id, str(folder / name), f"{artifact_path}/{name}" if artifact_path else name
                )

    def end(self, run_id: str, failed: bool = False) -> None:
        self.client.set_terminated(run_id, "FAILED" if failed else "FINISHED")

    def search(
        self, filter_string: str, max_results: int = 100, finished: bool = False, experiment_id: str | None = None
    ) -> list[Any]:
        """Runs of this experiment (or ``experiment_id``) matching ``filter_string``, newest first."""
        if finished:
            filter_string = " and ".join(f for f in (filter_string, "attributes.status = 'FINISHED'") if f)
        return list(
            self.client.search_runs(
                [experiment_id or self.experiment_id],
                filter_string,
                max_results=max_results,
                order_by=["attributes.start_time DESC"],
            )
        )

    def children(self, run: Any, kind: str | None = None) -> list[Any]:
        """Runs nested directly under ``run`` (an MLflow Run), oldest first."""
        filters = [f"tags.`{PARENT}` = '{run.info.run_id}'"] + ([f"tags.`{KIND}` = '{kind}'"] if kind else [])
        found = self.search(" and ".join(filters), max_results=1000, experiment_id=run.info.experiment_id)
        return sorted(found, key=lambda r: r.info.start_time)

    def download(self, run_id: str, path: str, dst: str | Path) -> Path:
        from mlflow.artifacts import download_artifacts

        return Path(download_artifacts(run_id=run_id, artifact_path=path, dst_path=str(dst), tracking_uri=self.uri))

    def run_url(self, run_id: str) -> str | None:
        """The MLflow UI page of a run when the store is a server."""
        if not self.uri.startswith(("http://", "https://")):
            return None
        return f"{redact(self.uri).rstrip('/')}/#/experiments/{self.experiment_id}/runs/{run_id}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value) if isinstance(value, (list, dict)) else str(value)


# ---------------------------------------------------------------------------------------------
# one evaluation


@dataclass(frozen=True)
class LoggedEvaluation:
    """The MLflow runs of one evaluation: the evaluation run and one run per system (label -> id)."""

    run_id: str
    systems: dict[str, str]
    url: str | None = None


def log_evaluation(
    tracker: Tracker,
    output: str | Path,
    *,
    infos: Mapping[str, Mapping[str, Any]] | None = None,
    labels: Mapping[str, str] | None = None,
    failed: Mapping[str, str] | None = None,
    parent: str | None = None,
    tags: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
    seeds: Mapping[str, int] | None = None,
    encode_rates: Mapping[str, float] | None = None,
) -> LoggedEvaluation:
    """Log the result folder ``output`` (written by the report stage) as an evaluation run with a
    child run per system; a system in ``failed`` (spec -> error) gets a FAILED child run.

    ``infos`` are the retrievals' info trees (resolved index parameters, model identities, encode
    counts); ``labels`` name systems (spec -> label, default the spec); ``tags`` (e.g. the Prefect
    flow run) go on every run; ``encode_rates`` (dense spec -> documents/s measured by this run's
    embed stage) fill in ``documents_per_second`` where latency was not measured.
    """
    output = Path(output)
    document = json.loads((output / "metrics.json").read_text(encoding="utf-8"))
    per_query = pd.read_parquet(output / "per_query.parquet")
    significance = output / "significance.csv"
    comparisons = pd.read_csv(significance) if significance.is_file() else pd.DataFrame()
    labels, infos, failed = dict(labels or {}), dict(infos or {}), dict(failed or {})
    dataset = document["dataset"]
    systems = list(dict.fromkeys(per_query["system"])) or list(document["systems"])
    base = {**dataset_params(dataset), **common_params(seeds), "depth": document.get("depth")}
    tags = {"irflow.dataset": dataset["name"], **(tags or {})}

    run_id = tracker.start(f"{dataset['name']} ({dataset['split']})", "evaluation", parent=parent, tags=tags)
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
    tracker.log_files(run_id, output, RESULT_FILES, RESULT_DIRS)

    children: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="irflow-track-") as tmp:
        for system in systems:
            label = labels.get(system, system)
            child = tracker.start(
                label, "system", parent=run_id, tags={**tags, "irflow.system": system, "irflow.label": label}
            )
            cost = dict(document.get("cost", {}).get(system) or {})
            rates = [r for leaf in _leaves(as_spec(system)) if (r := (encode_rates or {}).get(str(leaf)))]
            if rates and not cost.get("documents_per_second"):
                cost["documents_per_second"] = min(rates)
            tracker.log(
                child,
                params={**base, **system_params(system, infos.get(system), label)},
                metrics=system_metrics(document["systems"].get(system, {}), cost),
            )
            folder = Path(tmp) / str(len(children))
            folder.mkdir()
            per_query[per_query["system"] == system].to_parquet(folder / "per_query.parquet", index=False)
            trec = output / "runs" / f"{as_spec(system).slug}.trec"
            if trec.is_file():
                shutil.copyfile(trec, folder / "run.trec")
            tracker.log_files(child, folder, ("per_query.parquet", "run.trec"))
            tracker.end(child)
            children[label] = child
        for system, error in failed.items():
            label = labels.get(system, system)
            child = tracker.start(
                label,
                "system",
                parent=run_id,
                tags={**tags, "irflow.system": system, "irflow.label": label, "irflow.error": error[:5000]},
            )
            try:
                extra = system_params(system, None, label)
            except IrflowError:
                extra = {"system.spec": system}
            tracker.log(child, params={**base, **extra})
            tracker.end(child, failed=True)
            children[label] = child
    tracker.end(run_id, failed=bool(failed))
    return LoggedEvaluation(run_id, children, tracker.run_url(run_id))


# ---------------------------------------------------------------------------------------------
# reading tracked evaluations back


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
        raise TrackingError(f"no MLflow run {run_id!r} in {redact(tracker.uri)}: {_reason(err)}") from None
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


__all__ = [
    "Snapshot",
    "snapshot",
    "DEFAULT_EXPERIMENT",
    "KIND",
    "LoggedEvaluation",
    "Tracker",
    "TrackingError",
    "TrackingOptions",
    "artifact_root",
    "check_tracking",
    "comparison_metrics",
    "dataset_params",
    "git_commit",
    "log_evaluation",
    "metric_key",
    "mlflow_key",
    "redact",
    "system_metrics",
    "system_params",
    "texts_encoded",
    "tracking_uri",
]
