"""What an MLflow run records, computed from plain data: keys, params, metrics, provenance.

Pure functions (no MLflow): metric and param names MLflow accepts (``nDCG@10`` -> ``ndcg_at_10``),
everything a system's numbers depend on (spec, model identities, index and BM25 parameters), the
numbers of a metrics document, and the code's own provenance (irflow version, git commit).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.tasks.core.config import irflow_version, source_root
from irflow.tasks.core.schema import DatasetSummary, IrflowError, RetrievalInfo, info_nodes
from irflow.tasks.metrics import parse_measure
from irflow.tasks.systems.external import HttpSpec, PluginSpec, RunSpec
from irflow.tasks.systems.specs import BM25Spec, DenseSpec, HybridSpec, RerankSpec, as_spec, walk

COST_METRICS = (
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "mean_ms",
    "queries_per_second",
    "documents_per_second",
    "load_seconds",  # the model's loading before the first encoded batch (absent when nothing was encoded)
    "index_build_seconds",
    "retrieve_seconds",
    "prepare_seconds",
    "index_recall_at_10",  # approximate indexes (hnsw, ivf, ivfpq, chroma) against exact search
    "index_recall_at_100",
    "unknown_queries",  # external systems (run files, Python retrievers, services): dropped ids and hits
    "unknown_documents",
    "unknown_document_hits",
    "dropped_hits",
    "queries_without_hits",
    "api_calls",  # API embedding models: requests, tokens and USD of the evaluation and of the latency stage
    "api_tokens",
    "api_cost_usd",
    "latency_api_calls",
    "latency_api_tokens",
    "latency_api_cost_usd",
)
LOAD_METRICS = ("queries_per_second", "p50_ms", "p95_ms")  # per concurrency level of a service's load curve
SEEDS = {"seed.significance": 0, "seed.latency": 0}  # the pipeline's defaults; flows override them
_PLUGIN_IDENTITY = ("class", "source_sha256", "version")  # of a Python retriever, from its searcher's info
_BM25_PARAMS = ("k1", "b", "backend", "method", "stemmer", "stopwords")
_INDEX_RUNTIME = ("index_build_seconds", "index_from_cache", "index_load_seconds", "index_cached", "index_path")


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


def model_identity(model: str) -> str:
    """``hf:<name>@<commit>`` or ``sha256:<weights and configs>`` of a model, "unresolved" if it cannot be found."""
    from irflow.tasks.embed.models import resolve_model
    from irflow.tasks.systems.api_options import is_api_model

    if is_api_model(model):
        return model  # the endpoint and dimensions come from the retrieval's info (model_identity)
    try:
        return resolve_model(model).identity
    except (IrflowError, OSError):
        return "unresolved"


def system_params(system: str, info: RetrievalInfo | None = None, label: str | None = None) -> dict[str, Any]:
    """Everything a system's numbers depend on: its spec, models (with revision or weights hash),
    index type and parameters (as resolved when ``info`` from the retrieval is given), BM25 parameters."""
    spec = as_spec(system)
    kind = spec.plugin if isinstance(spec, PluginSpec) else spec.kind
    params: dict[str, Any] = {"system.spec": str(spec), "system.kind": kind, "system.label": label or str(spec)}
    resolved = {node["system"]: node for node in info_nodes(info) if "system" in node}
    seen: dict[str, int] = {}

    def put(prefix: str, values: dict[str, Any]) -> None:
        seen[prefix] = seen.get(prefix, 0) + 1
        suffix = "" if seen[prefix] == 1 else f".{seen[prefix]}"
        params.update({f"{k}{suffix}": v for k, v in values.items()})

    for node in walk(spec):
        if isinstance(node, BM25Spec):
            put(
                "bm25",
                {f"bm25.{k}": getattr(node, k) for k in ("k1", "b", "backend", "method", "stemmer", "stopwords")},
            )
        elif isinstance(node, DenseSpec):
            found = resolved.get(str(node), {})
            index = {
                f"index.{k.removeprefix('index_')}": v
                for k, v in found.items()
                if k.startswith("index_") and k not in _INDEX_RUNTIME
            }
            index.update({f"index.{k}": v for k, v in node.index_params})
            put(
                "dense",
                {
                    "model.name": node.model,
                    "model.identity": found.get("model_identity") or model_identity(node.model),
                    "dense.max_seq_length": node.max_seq_length or "model default",
                    "dense.query_prompt": json.dumps(found.get("query_prompt", node.query_prompt)),
                    "dense.doc_prompt": json.dumps(found.get("doc_prompt", node.doc_prompt)),
                    "dense.batch_size": node.batch_size,
                    "index.type": node.index,
                    **index,
                },
            )
        elif isinstance(node, HybridSpec):
            put(
                "hybrid",
                {
                    "hybrid.k": node.k,
                    "hybrid.weights": ":".join(f"{w:g}" for w in node.weights),
                    "hybrid.depth": node.depth or "max(depth, 100)",
                },
            )
        elif isinstance(node, RerankSpec):
            put(
                "rerank",
                {
                    "rerank.model": node.model,
                    "rerank.model_identity": model_identity(node.model),
                    "rerank.top": node.top,
                },
            )
        elif isinstance(node, (RunSpec, PluginSpec, HttpSpec)):
            put(node.kind, external_params(node, resolved.get(str(node), {})))
    return params


def external_params(node: RunSpec | PluginSpec | HttpSpec, found: Mapping[str, Any]) -> dict[str, Any]:
    """What a system built elsewhere depends on: the run file's full sha256, the retriever's code
    (class, source hash, package version) and options, the service's URL and options (never a token:
    ``auth_env`` names the variable)."""
    if isinstance(node, RunSpec):
        return {
            "run.path": node.path,
            "run.sha256": found.get("run_sha256") or node.sha256,
            "run.format": found.get("run_format", "unknown"),
        }
    if isinstance(node, PluginSpec):
        return {
            "plugin.kind": node.plugin,
            "plugin.target": node.target,
            "plugin.options": json.dumps(dict(node.options), sort_keys=True),
            **{f"plugin.{k}": found[f"plugin_{k}"] for k in _PLUGIN_IDENTITY if f"plugin_{k}" in found},
        }
    return {"http.url": node.url, **{f"http.{k}": v for k, v in node.options}}


def system_metrics(means: Mapping[str, float], cost: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Every metric under its MLflow key (``ndcg_at_10``) plus the numeric costs (latency, throughput), and
    a service's load curve as ``load_c<concurrency>_queries_per_second`` / ``_p50_ms`` / ``_p95_ms``."""
    out = {metric_key(m): float(v) for m, v in means.items()}
    for key in COST_METRICS:
        value = (cost or {}).get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    for level in (cost or {}).get("load_curve") or ():
        for key in LOAD_METRICS:
            out[f"load_c{int(level['concurrency'])}_{key}"] = float(level[key])
    return out


def texts_encoded(info: RetrievalInfo | None) -> int:
    """Documents plus queries a retrieval encoded itself (0 when every vector came from the cache)."""
    return sum(int(n.get("docs_encoded", 0)) + int(n.get("queries_encoded", 0)) for n in info_nodes(info))


def comparison_metrics(comparisons: pd.DataFrame, labels: Mapping[str, str] | None = None) -> dict[str, float]:
    """``delta.<system>.<metric>`` and ``p.<system>.<metric>`` (corrected) of each row of a significance table."""
    labels = labels or {}
    out: dict[str, float] = {}
    for row in comparisons.itertuples(index=False):
        name = labels.get(str(row.candidate), str(row.candidate))
        out[mlflow_key("delta", name, metric_key(str(row.metric)))] = float(row.delta)
        p = getattr(row, "p_adjusted", None)
        out[mlflow_key("p", name, metric_key(str(row.metric)))] = float(p if p is not None else row.p_randomization)
    return out


def dataset_params(summary: DatasetSummary | Mapping[str, Any]) -> dict[str, Any]:
    """``dataset.name``, ``dataset.split``, ``dataset.fingerprint`` and the counts of a metrics.json dataset block."""
    return {
        f"dataset.{k}": summary.get(k) for k in ("name", "split", "fingerprint", "documents", "queries", "judgements")
    }


def common_params(seeds: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Seeds (defaults :data:`SEEDS`), irflow's version and the git commit it runs from."""
    return {**SEEDS, **(seeds or {}), "irflow.version": irflow_version(), "git.commit": git_commit() or "unknown"}


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


__all__ = [
    "COST_METRICS",
    "LOAD_METRICS",
    "SEEDS",
    "common_params",
    "comparison_metrics",
    "dataset_params",
    "external_params",
    "git_commit",
    "metric_key",
    "mlflow_key",
    "model_identity",
    "system_metrics",
    "system_params",
    "texts_encoded",
]
