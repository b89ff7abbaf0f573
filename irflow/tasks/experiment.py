"""Experiments: datasets × systems × metrics as one typed, validated object (a YAML file or a UI form),
and the MTEB-style table of a suite (one row per system, one column per dataset, and the mean).

Example ``experiment.yaml``::

    name: techdocs-nightly          # names the configuration: nightly runs compare with the same name
    datasets: [techdocs, beir/scifact]
    systems:                        # a list of specs, or label: spec (a label keeps its history
      bm25: bm25                    #   across spec changes, e.g. a new max_seq_length)
      dense: dense:minilm
    metrics: [nDCG, R]              # families × cutoffs; names with @k are kept as they are
    cutoffs: [10, 100]
    baseline: bm25                  # a label or a spec (default: the first system)
    seed: 0                         # significance tests and latency sampling
    regression: {threshold: 0.01, alpha: 0.05}
    drift:                          # nightly: has this log's traffic drifted from the dataset's queries?
      techdocs: {current: logs/today.csv, alpha: 0.01}

A relative path in a ``run:`` spec or a drift log is read from the experiment file's folder (from the
working directory for an experiment given as parameters); the loaded experiment holds canonical specs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from irflow.tasks.core.paths import regular_file
from irflow.tasks.core.schema import Correction, InputError, UnknownNameError
from irflow.tasks.evalsets.drift import DriftCheck
from irflow.tasks.ingest import check_name
from irflow.tasks.metrics import expand, parse_measures
from irflow.tasks.systems.external import PluginSpec
from irflow.tasks.systems.specs import DenseSpec, RerankSpec, as_spec, parse_system, walk

EXPERIMENT_DEFAULT_SYSTEMS = ["bm25", "dense:minilm", "hybrid:bm25+dense:minilm"]
EXPERIMENT_DEFAULT_METRICS = ["nDCG@10", "nDCG@100", "R@10", "R@100", "P@10", "RR@10", "AP@100", "Success@10", "Rprec"]


class Regression(BaseModel):
    """When a nightly run counts as a regression: a drop larger than ``threshold`` (in metric units,
    e.g. 0.01 nDCG) that is significant after correcting over every comparison of the run."""

    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(0.01, ge=0, description="smallest drop (absolute, metric units) that counts")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level after correction")
    correction: Correction = "holm"
    metrics: list[str] = Field(default_factory=list, description="metrics watched (default: all of the experiment's)")
    permutations: int = Field(10_000, ge=100, description="sign flips of the randomization test")


class Experiment(BaseModel):
    """Datasets × systems × metrics, evaluated together (the parameters of the suite and nightly flows)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("irflow", description="configuration name; nightly runs compare with runs of the same name")
    datasets: list[str] = Field(default_factory=lambda: ["techdocs"], min_length=1)
    split: str | None = Field(None, description="split of every dataset (default: test; dev for MS MARCO)")
    systems: list[str] | dict[str, str] = Field(
        default_factory=lambda: list(EXPERIMENT_DEFAULT_SYSTEMS), description="system specs, or label: spec"
    )
    metrics: list[str] = Field(default_factory=lambda: list(EXPERIMENT_DEFAULT_METRICS), min_length=1)
    cutoffs: list[int] = Field(default_factory=list, description="expand metric families (nDCG, R, ...) at these k")
    baseline: str | None = Field(None, description="label or spec of the system the others are compared with")
    depth: int | None = Field(
        None, ge=1, le=1000, description="hits per query (default 100; a run file: every line, as trec_eval reads it)"
    )
    latency_runs: int = Field(0, ge=0, description="timed repetitions per query (0: skip latency)")
    seed: int = 0
    mlflow_experiment: str = Field("irflow", description="MLflow experiment the runs are logged to")
    regression: Regression = Field(default_factory=Regression)
    drift: dict[str, DriftCheck] = Field(
        default_factory=dict,
        description="dataset -> drift check of a query log against its queries (nightly runs it beside the "
        "regression check); the check's reference is the dataset",
    )

    @field_validator("drift", mode="before")
    @classmethod
    def _reference_is_the_dataset(cls, value: Any) -> Any:
        """``drift: {D: {current: LOG}}``: the check's reference is D (given again, it must be D)."""
        if not isinstance(value, Mapping):
            return value
        checks = {}
        for dataset, settings in value.items():
            if isinstance(settings, Mapping):
                if settings.get("reference", dataset) != dataset:
                    raise ValueError(f"{dataset}: reference is the dataset itself, got {settings['reference']!r}")
                settings = {**settings, "reference": dataset}
            checks[dataset] = settings
        return checks

    @model_validator(mode="after")
    def _drift_of_evaluated_datasets(self) -> Experiment:
        unknown = [d for d in self.drift if d not in self.datasets]
        if unknown:
            raise ValueError(f"drift: {unknown} not among the experiment's datasets {self.datasets}")
        return self

    def labelled(self) -> dict[str, str]:
        """label -> canonical spec; a plain list uses each canonical spec as its own label."""
        items = self.systems.items() if isinstance(self.systems, dict) else ((None, s) for s in self.systems)
        out: dict[str, str] = {}
        for label, system in items:
            spec = str(as_spec(system))
            out.setdefault(label or spec, spec)
        if not out:
            raise InputError("an experiment needs at least one system")
        return out

    def specs(self) -> list[str]:
        """The canonical specs, baseline first, each once."""
        labelled = self.labelled()
        return list(dict.fromkeys([self.baseline_spec(), *labelled.values()]))

    def labels(self) -> dict[str, str]:
        """spec -> label (the first label of a spec wins)."""
        out: dict[str, str] = {}
        for label, spec in self.labelled().items():
            out.setdefault(spec, label)
        return out

    def baseline_spec(self) -> str:
        labelled = self.labelled()
        if self.baseline is None:
            return next(iter(labelled.values()))
        return labelled.get(self.baseline) or str(as_spec(self.baseline))

    def measures(self) -> list[str]:
        """Canonical metric names: families × cutoffs when cutoffs are given, else the names as written."""
        parsed = expand(self.metrics, self.cutoffs) if self.cutoffs else parse_measures(self.metrics)
        return [m.name for m in parsed]

    def watched(self) -> list[str]:
        """The metrics a nightly run watches for regressions."""
        return [m.name for m in parse_measures(self.regression.metrics)] if self.regression.metrics else self.measures()

    def config_id(self) -> str:
        """What makes two runs comparable: name, datasets, split, system labels and metrics (not the specs)."""
        key = {
            "name": self.name,
            "datasets": self.datasets,
            "split": self.split,
            "labels": sorted(self.labelled()),
            "metrics": self.measures(),
        }
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment YAML (or JSON) file; errors name the file and the field."""
    import yaml

    path = Path(path)
    if path.exists():  # a missing file keeps its own message
        regular_file(path, "an experiment file (YAML)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as err:
        raise InputError(f"cannot read experiment file: {err.strerror}", path=str(path)) from None
    except yaml.YAMLError as err:
        raise InputError(f"not valid YAML: {err}", path=str(path)) from None
    return _canonical_specs(parse_experiment(data, str(path)), path)


def _canonical_specs(experiment: Experiment, path: Path) -> Experiment:
    """The experiment with canonical specs, relative ``run:`` paths read from the file's folder."""
    folder = path.resolve().parent

    def canonical(spec: str, field: str) -> str:
        try:
            return str(parse_system(spec, folder))
        except (InputError, UnknownNameError) as err:
            raise type(err)(f"{path}: {field}: {err}") from None

    systems = experiment.systems
    if isinstance(systems, dict):
        resolved: list[str] | dict[str, str] = {k: canonical(v, f"systems.{k}") for k, v in systems.items()}
    else:
        resolved = [canonical(s, f"systems[{i}]") for i, s in enumerate(systems)]
    labels = resolved if isinstance(resolved, dict) else {}
    baseline = experiment.baseline
    if baseline is not None and baseline not in labels:
        baseline = canonical(baseline, "baseline")
    drift = {
        dataset: check.model_copy(update={"current": str(folder / Path(check.current).expanduser())})
        for dataset, check in experiment.drift.items()
    }
    return experiment.model_copy(update={"systems": resolved, "baseline": baseline, "drift": drift})


def parse_experiment(data: Mapping[str, Any] | Experiment, where: str | None = None) -> Experiment:
    """An :class:`Experiment` from a mapping (a parsed file, flow parameters)."""
    if isinstance(data, Experiment):
        return data
    try:
        return Experiment.model_validate(dict(data))
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'experiment'}: {e['msg']}" for e in err.errors())
        raise InputError(f"invalid experiment: {problems}", path=where) from None


def models_of(system: str) -> list[str]:
    """Every model a system loads: dense first stages and rerankers."""
    return [node.model for node in walk(as_spec(system)) if isinstance(node, (DenseSpec, RerankSpec))]


def check_models(systems: Sequence[str]) -> None:
    """Resolve every model of the systems now (cheap: no weights are loaded) so a bad name fails early;
    the module of a ``python:`` system must be importable (found, not imported)."""
    import importlib.util

    from irflow.tasks.embed.api import ApiModel
    from irflow.tasks.embed.models import require_backend, resolve_model
    from irflow.tasks.embed.vectors import model_for
    from irflow.tasks.systems.api_options import is_api_model

    for system in systems:
        for node in walk(as_spec(system)):
            if isinstance(node, PluginSpec) and node.plugin == "python":
                module = node.target.partition(":")[0]
                try:
                    found = importlib.util.find_spec(module)
                except (ImportError, ValueError):
                    found = None
                if found is None:
                    raise UnknownNameError(f"system {system!r}: no module named {module!r} on the Python path")
        for node in walk(as_spec(system)):
            if isinstance(node, DenseSpec) and isinstance(api := model_for(node), ApiModel):
                api.key()  # api.openai.com needs a key: fail before any work, not after BM25
        for model in models_of(system):
            if is_api_model(model):
                continue
            try:
                resolve_model(model)
            except UnknownNameError as err:
                raise UnknownNameError(f"system {system!r}: {err}") from None
        for node in walk(as_spec(system)):  # an onnx/openvino backend whose packages are missing fails now too
            if isinstance(node, DenseSpec | RerankSpec) and node.backend != "torch":
                require_backend(node.backend, node.quantize)


def validate_experiment(experiment: Experiment) -> Experiment:
    """Check datasets, systems, models, metrics and baseline before anything runs (errors list the choices)."""
    for dataset in experiment.datasets:
        check_name(dataset)
    specs = experiment.specs()
    check_models(specs)
    experiment.measures()
    experiment.watched()
    check_drift(experiment)
    return experiment


def check_drift(experiment: Experiment) -> None:
    """Each drift check's log is readable with at least 2 queries and its model is known, so a nightly
    run does not find out after its suite."""
    from irflow.tasks.embed.models import resolve_model
    from irflow.tasks.evalsets.drift import read_queries

    for dataset, check in experiment.drift.items():
        where = f"drift.{dataset}"
        if not Path(check.current).is_file():
            raise InputError(f"{where}.current: query log not found", path=check.current)
        try:
            found = len(read_queries(check.current))
        except InputError as err:
            raise InputError(f"{where}.current: {err}") from None
        if found < 2:
            raise InputError(f"{where}.current: a drift check needs at least 2 distinct queries, found {found}",
                             path=check.current)  # fmt: skip
        try:
            resolve_model(check.model)
        except UnknownNameError as err:
            raise UnknownNameError(f"{where}.model: {err}") from None


# ---------------------------------------------------------------------------------------------
# the suite table


def suite_table(
    documents: Mapping[str, Mapping[str, Any]], metric: str, labels: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """One row per system (label), one column per dataset, then ``mean`` over the datasets it has a
    value for and ``datasets`` (how many). ``documents`` maps dataset -> metrics document."""
    labels = labels or {}
    columns = {
        name: {labels.get(s, s): values.get(metric) for s, values in doc.get("systems", {}).items()}
        for name, doc in documents.items()
    }
    table = pd.DataFrame(columns, dtype="float64")
    table.index.name = "system"
    table["mean"] = table.mean(axis=1, skipna=True)
    table["datasets"] = table.drop(columns="mean").notna().sum(axis=1)
    return table


def suite_markdown(
    documents: Mapping[str, Mapping[str, Any]],
    metrics: Sequence[str],
    labels: Mapping[str, str] | None = None,
    failed: Mapping[str, str] | None = None,
) -> str:
    """The suite report: a table per metric (best per column in bold) and what failed."""
    lines = [f"# Suite: {len(documents)} dataset(s)", ""]
    for metric in metrics:
        table = suite_table(documents, metric, labels)
        if table.empty:
            continue
        values = table.drop(columns="datasets")
        best = values.max(axis=0)
        lines += [
            f"## {metric}",
            "",
            "| system | " + " | ".join(values.columns) + " |",
            "|---|" + "---:|" * len(values.columns),
        ]
        for system, row in values.iterrows():
            cells = ["-" if math.isnan(v) else (f"**{v:.4f}**" if v == best[c] else f"{v:.4f}") for c, v in row.items()]
            lines.append(f"| `{system}` | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("`mean` is over the datasets a system has a result for.")
    if failed:
        lines += ["", "## Failed", ""] + [f"- `{what}`: {error}" for what, error in failed.items()]
    return "\n".join(lines) + "\n"


__all__ = [
    "Experiment",
    "Regression",
    "check_drift",
    "check_models",
    "load_experiment",
    "models_of",
    "parse_experiment",
    "suite_markdown",
    "suite_table",
    "validate_experiment",
]
