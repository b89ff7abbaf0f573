"""An evaluation's arguments, checked once and typed: :class:`EvaluationRequest`.

:func:`make_request` is the one validation of ``irflow.evaluate``, ``irflow run`` and the ``evaluate`` flow:
every argument is checked before a dataset, a model or a corpus is loaded, and every problem is an
:class:`~irflow.tasks.core.schema.InputError` (a ``ValueError``) that names the argument and, for an
unknown name, suggests the nearest known one. A system spec is parsed here, once, into a
:class:`~irflow.tasks.systems.SystemSpec` that travels to the searcher.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

import pandas as pd

from irflow.tasks.core.names import suggestion
from irflow.tasks.core.runs import validate_depth
from irflow.tasks.core.schema import Dataset, InputError, IrflowError, UnknownNameError
from irflow.tasks.ingest.names import check_dataset_name, check_split
from irflow.tasks.systems import MemorySpec, RunSpec, Spec, SystemSpec, as_spec, default_label, leaves

DEFAULT_DATASET = "techdocs"
DEFAULT_SYSTEMS = ("bm25", "dense:minilm", "hybrid:bm25+dense:minilm")
DEFAULT_METRICS = ("nDCG@10", "nDCG@100", "R@10", "R@100", "P@10", "RR@10", "AP@100", "Success@10", "Rprec")

Run: TypeAlias = Mapping[str, Mapping[str, float]] | pd.DataFrame
"""A ranking made elsewhere: ``{query_id: {doc_id: score}}`` (as ranx and pytrec_eval take it) or a DataFrame
``query_id, doc_id, score``."""
SystemInput: TypeAlias = str | SystemSpec | Run | Callable[..., Any]
"""A system: a spec string (as ``--system``), a parsed spec, a run, or a callable ``(queries, k) -> hits``."""


@dataclass(frozen=True)
class SystemEntry:
    """One system of a request: its spec (parsed once), the label given to it (None: its default label), and
    for a system given in Python its run or search callable."""

    spec: SystemSpec
    label: str | None = None
    source: pd.DataFrame | Callable[..., Any] | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        """The canonical spec: how the result folder, the caches and MLflow name the system."""
        return str(self.spec)

    @property
    def name(self) -> str:
        """What a person reads: the given label, else the default label of the spec."""
        return self.label or default_label(self.spec)


@dataclass(frozen=True)
class EvaluationRequest:
    """Everything an evaluation needs, checked: the dataset (a stored name, a loaded :class:`Dataset`, or
    judgements alone), the systems (baseline first, each once), canonical metric names and the options."""

    dataset: str | Dataset
    systems: tuple[SystemEntry, ...]
    metrics: tuple[str, ...]
    split: str | None = None
    depth: int | None = None
    human: str | None = None  # a stored dataset's name or a judgements file (core.paths.file_or_dataset says which)
    seed: int = 0
    latency_runs: int = 0

    @property
    def dataset_name(self) -> str:
        return self.dataset if isinstance(self.dataset, str) else self.dataset.name

    @property
    def specs(self) -> list[str]:
        """Canonical specs, baseline first."""
        return [s.key for s in self.systems]

    @property
    def baseline(self) -> str:
        return self.systems[0].key

    @property
    def labels(self) -> dict[str, str]:
        """spec -> label, for the systems given a label (metrics.json's ``labels``)."""
        return {s.key: s.label for s in self.systems if s.label and not isinstance(s.spec, MemorySpec)}

    def sources(self) -> dict[str, pd.DataFrame | Callable[..., Any]]:
        """spec -> the run or callable of each system given in Python."""
        return {s.key: s.source for s in self.systems if s.source is not None}


def make_request(
    dataset: str | Dataset | None = None,
    systems: Sequence[SystemInput] | Mapping[str, SystemInput] | None = None,
    *,
    qrels: Run | None = None,
    metrics: Sequence[str] | None = None,
    baseline: str | None = None,
    depth: int | None = None,
    split: str | None = None,
    human: str | Path | None = None,
    seed: int = 0,
    latency_runs: int = 0,
    labels: Mapping[str, str] | None = None,
) -> EvaluationRequest:
    """Check every argument of an evaluation (see :func:`irflow.evaluate`) and return them typed. ``labels``
    (spec -> label) names systems given as a list of specs (``irflow run --label``)."""
    data = _dataset(dataset, qrels, split)
    entries = _systems(systems, corpus=not isinstance(data, Dataset) or len(data.corpus) > 0)
    if labels:
        given = {str(as_spec(spec)): label for spec, label in labels.items()}
        entries = [SystemEntry(e.spec, e.label or given.get(e.key), e.source) for e in entries]
    chosen = _with_baseline(entries, baseline)
    measures = _metrics(metrics)
    _options(depth, seed, latency_runs)
    if isinstance(data, str):
        check_split(data, split)
    if human is not None:
        if not isinstance(data, str):
            raise InputError("human: calibration needs a stored dataset as dataset= (its judgements are a judge's)")
        human = check_human(human)
    _check_models(chosen)
    return EvaluationRequest(data, chosen, measures, split, depth, human, seed, latency_runs)


def check_human(human: str | Path, option: str = "human") -> str:
    """Human judgements as ``human=`` (``--human``) takes them: a stored dataset's name (did-you-mean for a
    misspelt one) or a file of judgements (a qrels file or a filled sheet, a regular file: nothing is read)."""
    from irflow.tasks.core.paths import describe_path, file_or_dataset
    from irflow.tasks.ingest import JUDGEMENTS_FILE

    if not isinstance(human, str | Path) or not str(human):
        raise InputError(f"{option}: expected a dataset name or a file of human judgements, got {human!r}")
    text = str(human)
    if file_or_dataset(text) == "file":
        what = describe_path(Path(text).expanduser())
        if what is not None:
            raise InputError(f"{option}: {text}: {what}; expected a stored dataset or {JUDGEMENTS_FILE}")
        return text
    check_dataset_name(text, option)
    return text


def _dataset(dataset: str | Dataset | None, qrels: Run | None, split: str | None) -> str | Dataset:
    if qrels is not None:
        if dataset is not None:
            raise InputError("qrels: give judgements with in-memory runs and no dataset, or a dataset alone")
        return _judgements_only(qrels)
    if dataset is None:
        return DEFAULT_DATASET
    if isinstance(dataset, Dataset):
        return dataset
    if not isinstance(dataset, str):
        raise InputError(f"dataset: expected a dataset name or an irflow.Dataset, got a {type(dataset).__name__}")
    check_dataset_name(dataset, "dataset")
    return dataset


def _judgements_only(qrels: Run) -> Dataset:
    """A dataset of judgements alone (no corpus, no query texts), for in-memory runs."""
    import hashlib

    from irflow.tasks.retrieve.memory import as_qrels

    table = as_qrels(qrels, "qrels")
    ordered = table.sort_values(["query_id", "doc_id"]).reset_index(drop=True)
    digest = hashlib.sha256(ordered.to_csv(index=False).encode()).hexdigest()
    queries = pd.DataFrame({"query_id": pd.Series(ordered["query_id"].unique(), dtype="str"), "text": ""})
    corpus = pd.DataFrame({"doc_id": pd.Series(dtype="str"), "title": "", "text": ""})
    grades = ordered["relevance"].value_counts().sort_index()
    return Dataset(
        "in-memory",
        "test",
        corpus,
        queries,
        ordered,
        {
            "name": "in-memory",
            "split": "test",
            "source": {"kind": "memory"},
            "fingerprint": digest,
            "documents": 0,
            "queries": len(queries),
            "judgements": len(ordered),
            "grades": {str(g): int(n) for g, n in grades.items()},
        },
    )


def _systems(systems: Sequence[SystemInput] | Mapping[str, SystemInput] | None, corpus: bool) -> list[SystemEntry]:
    if systems is None:
        if not corpus:
            raise InputError("systems: with qrels and no dataset, give the runs, e.g. systems={'mine': run}")
        systems = DEFAULT_SYSTEMS
    if isinstance(systems, (str, pd.DataFrame)) or callable(systems):
        systems = [systems]
    if isinstance(systems, Mapping):
        items: list[tuple[str | None, SystemInput]] = [(_label(k), v) for k, v in systems.items()]
    elif isinstance(systems, Sequence):
        items = [(None, v) for v in systems]
    else:
        raise InputError(
            f"systems: expected a list of specs or a mapping label -> system, got {type(systems).__name__}"
        )
    if not items:
        raise InputError("systems: no system given; e.g. systems=['bm25']")
    entries: list[SystemEntry] = []
    for label, value in items:
        entry = _entry(label, value, corpus)
        if entry.key in {e.key for e in entries}:
            continue  # the same system twice: evaluated once
        if entry.label and entry.label in {e.label for e in entries}:
            raise InputError(f"systems: the label {entry.label!r} is given twice")
        entries.append(entry)
    return entries


def _label(key: object) -> str:
    text = " ".join(str(key).split())
    if not text or len(text) > 60:
        raise InputError(f"systems: label {key!r}: expected 1 to 60 characters")
    return text


def _entry(label: str | None, value: SystemInput, corpus: bool) -> SystemEntry:
    where = f"systems[{label!r}]" if label else "systems"
    if isinstance(value, (str, Spec)):
        spec = _spec(value, where)  # type: ignore[arg-type]
        if not corpus and not all(isinstance(leaf, (RunSpec, MemorySpec)) for leaf in leaves(spec)):
            raise InputError(
                f"{where}: {str(spec)!r} searches a corpus, and only judgements were given: pass a dataset, or "
                "in-memory runs"
            )
        return SystemEntry(spec, label)
    if label is None:
        raise InputError(
            f"systems: a {type(value).__name__} needs a label: pass a mapping, e.g. systems={{'mine': run}}"
        )
    if callable(value) and not isinstance(value, pd.DataFrame):
        if not corpus:
            raise InputError(f"{where}: a callable searches queries by their text; qrels alone have none")
        return SystemEntry(MemorySpec(label), label, value)
    from irflow.tasks.retrieve.memory import as_run

    return SystemEntry(MemorySpec(label), label, as_run(value, where))


def _spec(value: str | SystemSpec, where: str) -> SystemSpec:
    try:
        return as_spec(value)
    except (InputError, UnknownNameError) as exc:
        from irflow.tasks.systems import KINDS

        text = str(value)
        head = text.partition(":")[0].partition("(")[0]
        hint = suggestion(head, KINDS) if head not in KINDS else ""
        first = str(exc).split("\n")[0].split("; valid kinds")[0]
        raise InputError(f"{where}: {first}{hint}; `irflow run --help` lists the system specs") from None


def _with_baseline(entries: list[SystemEntry], baseline: str | None) -> tuple[SystemEntry, ...]:
    """The baseline first (a label or a spec; default the first system; a spec not listed is added)."""
    if baseline is None:
        return tuple(entries)
    by_label = {e.label: e for e in entries if e.label}
    if baseline in by_label:
        chosen = by_label[baseline]
    else:
        spec = _spec(baseline, "baseline")
        chosen = next((e for e in entries if e.key == str(spec)), SystemEntry(spec))
    return (chosen, *(e for e in entries if e.key != chosen.key))


def _metrics(metrics: Sequence[str] | None) -> tuple[str, ...]:
    from irflow.tasks.metrics import parse_measures
    from irflow.tasks.metrics.measures import FAMILIES

    names = DEFAULT_METRICS if metrics is None else ([metrics] if isinstance(metrics, str) else list(metrics))
    if not names:
        raise InputError("metrics: no metric given; e.g. metrics=['nDCG@10']")
    try:
        return tuple(m.name for m in parse_measures(names))
    except (InputError, UnknownNameError, ValueError) as exc:
        bad = next((n for n in names if not _parses(n)), names[0])
        known = [*FAMILIES, *DEFAULT_METRICS]
        raise InputError(f"metrics: {str(exc).split(chr(10))[0]}{suggestion(str(bad), known)}") from None


def _parses(name: object) -> bool:
    from irflow.tasks.metrics import parse_measure

    try:
        parse_measure(name)  # type: ignore[arg-type]
    except (IrflowError, ValueError, KeyError, TypeError):
        return False
    return True


def _options(depth: int | None, seed: int, latency_runs: int) -> None:
    if depth is not None:
        try:
            validate_depth(depth)
        except InputError:
            raise InputError(f"depth: expected an integer between 1 and 1000 (hits per query), got {depth!r}") from None
    if isinstance(latency_runs, bool) or not isinstance(latency_runs, int) or latency_runs < 0:
        raise InputError(f"latency_runs: expected an integer >= 0 (0: skip latency), got {latency_runs!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"seed: expected an integer, got {seed!r}")


def _check_models(entries: Sequence[SystemEntry]) -> None:
    """Every model a system loads resolves, and a ``python:`` module is found (nothing is loaded)."""
    from irflow.tasks.experiment import check_models

    try:
        check_models([e.key for e in entries if not isinstance(e.spec, MemorySpec)])
    except UnknownNameError as exc:
        raise InputError(str(exc)) from None


__all__ = [
    "DEFAULT_DATASET",
    "DEFAULT_METRICS",
    "DEFAULT_SYSTEMS",
    "EvaluationRequest",
    "Run",
    "SystemEntry",
    "SystemInput",
    "make_request",
]
