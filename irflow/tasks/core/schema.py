"""Shared types of irflow: the canonical dataset, errors, and the column contract.

Every stage reads and writes these shapes and nothing else, so a task module never needs
another task module's internals.

Canonical tables (all ids are strings, always):

* corpus  — ``doc_id``, ``title``, ``text``, then any metadata columns (e.g. ``doc_type``)
* queries — ``query_id``, ``text``, then any metadata columns (e.g. ``category``)
* qrels   — ``query_id``, ``doc_id``, ``relevance`` (int64 grade; 0 = judged not relevant)
* run     — ``query_id``, ``doc_id``, ``score`` (float64), ``rank`` (int64, 1-based)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict

if TYPE_CHECKING:  # pandas is imported by the stages that build tables, not by the errors and names
    import pandas as pd

RUN_COLUMNS = ("query_id", "doc_id", "score", "rank")

Correction = Literal["holm", "bonferroni"]
"""A multiple-comparison correction (``significance.correct``). Here, not in significance.py, so that
an experiment spec can name one without importing scipy (~1.3 s)."""

RetrievalInfo = dict[str, Any]
"""What a retrieval reports about how it ran, one node per system of its spec (``RunResult.info``).

Every node has ``system`` (the canonical spec) and what that stage did: ``index_*`` (resolved
index type and parameters, build/load seconds, cache hits, path), ``model_identity``,
``query_prompt``/``doc_prompt``, ``docs_encoded``/``queries_encoded``, ``documents_per_second``,
``rerank_model``/``rerank_top``/``rerank_seconds``. A hybrid's node holds ``members`` (member
spec -> node), a rerank's node ``first_stage`` (node). Walk it with :func:`info_nodes`.
"""


def info_nodes(info: Mapping[str, Any] | None) -> Iterator[Mapping[str, Any]]:
    """Every node of a retrieval info tree, the root first, then hybrid members and rerank first stages."""
    if not info:
        return
    yield info
    for member in (info.get("members") or {}).values():
        yield from info_nodes(member)
    yield from info_nodes(info.get("first_stage"))


class IrflowError(Exception):
    """Base class of every error irflow raises on purpose; the CLI prints these without a traceback."""


class InputError(IrflowError, ValueError):
    """Bad input data. The message names the file, the line (or byte offset / field) and what was expected."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class DownloadError(IrflowError):
    """A download failed, was incomplete, or did not match its checksum. Nothing was cached."""


class WriteError(IrflowError):
    """A file or folder could not be written (disk full, quota, read-only, no permission). The message names
    the path and what happened; the temporary being written is removed and the target keeps its old content."""


class UnknownNameError(IrflowError, KeyError):
    """An unknown dataset, system, model or metric name. The message lists the valid choices."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class Manifest(TypedDict, total=False):
    """A stored split's ``manifest.json`` (written by ``ingest.canonical``): provenance and counts.

    ``irflow datasets info --json`` prints it. Every key is present in a stored split except
    ``unjudged_queries`` (a query set sampled from a log) and ``candidates`` (a zbench import's
    candidates table, read by annotate); a dataset built in memory (tests, previews) may carry fewer.
    """

    name: str
    split: str
    source: dict[str, Any]  # kind, location, and what the import recorded (querylog, clicks, sheet, synthesis)
    fingerprint: str  # sha256 of the table contents only: the same data by any route, the same fingerprint
    documents: int
    queries: int  # judged queries of the split (a sampled query set: every query)
    judgements: int
    grades: dict[str, int]  # grade -> number of judgements
    ignore_identical_ids: bool  # ArguAna, Quora: a hit whose doc id equals the query id is dropped
    dropped_qrels: dict[str, int]  # unknown_query, unknown_doc, duplicate
    missing_documents: dict[str, Any]  # judged documents absent from the corpus (kept: relevant, unretrievable)
    store_format: int
    irflow_version: str
    document_metadata: list[str]
    query_metadata: list[str]
    unjudged_queries: int
    candidates: str


@dataclass(frozen=True)
class Dataset:
    """One canonical dataset split: corpus, judged queries of the split, and their qrels (a zbench
    candidates import and a query set sampled from a log also keep queries that are not judged yet).

    ``manifest`` holds the provenance (source, split, counts, fingerprint, irflow version,
    ``ignore_identical_ids``, dropped qrels). ``fingerprint`` is a sha256 of the table contents
    only, so the same data gives the same fingerprint whatever route it came by.
    """

    name: str
    split: str
    corpus: pd.DataFrame
    queries: pd.DataFrame
    qrels: pd.DataFrame
    manifest: Manifest = field(default_factory=lambda: Manifest())

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    @property
    def ignore_identical_ids(self) -> bool:
        """True where a hit whose doc id equals the query id must be dropped (ArguAna, Quora)."""
        return self.manifest.get("ignore_identical_ids", False)

    def grades(self) -> dict[int, int]:
        """Histogram grade -> number of judgements."""
        counts = self.qrels["relevance"].value_counts().sort_index()
        return {int(g): int(n) for g, n in counts.items()}


# ---------------------------------------------------------------------------------------------
# the metrics document (metrics.json), typed once for every reader and writer


class DatasetSummary(TypedDict):
    """The ``dataset`` block of metrics.json: which data the numbers are on."""

    name: str
    split: str
    fingerprint: str
    documents: int | None
    queries: int | None
    judgements: int | None
    grades: dict[str, int] | None
    missing_documents: NotRequired[dict[str, Any]]  # judged documents absent from the corpus (kept, unretrievable)


class MlflowRef(TypedDict, total=False):
    """Where an evaluation was tracked (``metrics.json["mlflow"]``)."""

    run_id: str
    experiment: str
    experiment_id: str
    systems: dict[str, str]
    url: str | None
    runs_url: str | None  # the run list with the saved view "irflow headline" open (tracking_view)


class JudgementOrigin(TypedDict):
    """Where a split's judgements come from, when that limits what they can see (``coverage.origin``)."""

    kind: str  # "clicks" or "pool"
    contributors: list[str]  # the systems whose results were judged; empty when the source does not name them
    description: str


class Coverage(TypedDict, total=False):
    """The ``coverage`` block of metrics.json (``tasks.report.coverage``): how much of each top 10 is judged."""

    measure: str  # Judged@10
    systems: dict[str, float]  # spec -> mean Judged@10 over the judged queries
    warning: str  # present when coverage is uneven (it can decide the comparison)
    note: str  # present when a system has less than 90% of its top 10 judged
    origin: JudgementOrigin  # present for click-derived and pooled judgements


class MetricsDocument(TypedDict, total=False):
    """metrics.json: ``dataset`` and ``systems`` (spec -> metric -> mean) always; ``cost`` (spec ->
    ``p50_ms``, ``queries_per_second``, ...), the run's settings, and after tracking ``mlflow``;
    ``failed`` (spec -> error) when systems failed; ``calibrated`` and ``calibration`` with ``--human``."""

    dataset: DatasetSummary
    systems: dict[str, dict[str, float]]
    baseline: str | None
    significance: dict[str, Any]
    cost: dict[str, dict[str, Any]]
    measures: list[str]
    depth: int
    irflow_version: str
    mlflow: MlflowRef
    tracking: dict[str, Any]  # tracking that began and did not finish: status unfinished | stopped | failed
    failed: dict[str, str]
    coverage: Coverage
    calibrated: dict[str, dict[str, dict[str, Any]]]  # with --human: spec -> metric -> PPI++ estimate, ci, ...
    calibration: dict[str, Any]  # with --human: the human dataset, method, half_width, notes
