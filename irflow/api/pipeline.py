"""The evaluation, composed once: ingest → embed → retrieve → latency → metrics → significance → calibrate →
the result folder's content and its verdict.

:func:`run_evaluation` is the one composition. Each stage is a method of :class:`Stages`, a plain call of a
pure function from ``irflow.tasks``; the ``evaluate`` flow passes a subclass whose methods run the same
functions as Prefect tasks (retries, caching, Dask), so a notebook and the flow compute the same numbers
by the same code.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api.evaluation import Evaluation
from irflow.api.request import EvaluationRequest, SystemEntry
from irflow.tasks.core.schema import Dataset, IrflowError
from irflow.tasks.report.write import SystemEvaluation
from irflow.tasks.systems import SystemSpec

log = logging.getLogger(__name__)


class SystemsFailed(IrflowError):
    """Some systems failed; the others' results were still written (and tracked): ``evaluation`` holds them
    (None when every system failed)."""

    def __init__(self, message: str, evaluation: Evaluation | None = None) -> None:
        super().__init__(message)
        self.evaluation = evaluation


def system_evaluation(
    dataset: Dataset,
    system: str,
    result: Any,
    measures: list[str],
    cost: Mapping[str, Any],
    encodes: Sequence[Mapping[str, Any]] = (),
) -> SystemEvaluation:
    """Per-query metrics and the cost block of one retrieval (``encodes``: the embed stage's records of the
    system's corpus encodings, whose API calls are part of its cost)."""
    from irflow.tasks.metrics import evaluate, mean
    from irflow.tasks.retrieve.costs import fresh_costs, retrieval_costs

    per_query = evaluate(result.run, dataset.qrels, measures)
    block = {
        "retrieve_seconds": result.search_seconds,
        "prepare_seconds": result.prepare_seconds,
        **retrieval_costs(result.info, encodes),
        **cost,
    }
    block = fresh_costs(block, result.info, encodes)  # a cached stage says so and carries no timing
    return SystemEvaluation(system, result.run, per_query, mean(per_query), block)


def embed_record(encode: Any, job: Any, dataset: Dataset) -> dict[str, Any]:
    """One corpus encoding's record: what ``encode(dataset, job)`` returned, or its failure (``error``; ``final``
    when irflow named it: retrieval would fail the same way, so it is not tried)."""
    try:
        return dict(encode(dataset, job))
    except Exception as exc:
        return {
            "encoded": 0,
            "seconds": 0.0,
            "cached": False,
            "error": f"{type(exc).__name__}: {exc}",
            **({"final": True} if isinstance(exc, IrflowError) else {}),
        }


class Stages:
    """The stages of an evaluation, run in this process (no Prefect): each a call of a pure function."""

    def ingest(self, name: str, split: str | None) -> Dataset:
        from irflow.tasks.ingest import load_dataset

        return load_dataset(name, split)

    def embed(self, dataset: Dataset, specs: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Encode (or find in the Parquet cache) every corpus the systems need; per dense spec what was done."""
        from irflow.tasks.embed import sharding

        out = {}
        for job in sharding.embed_jobs(dataset, specs):
            cached = job.complete
            out[job.system] = {"cached": cached, **embed_record(sharding.encode_job, job, dataset)}
        return out

    def retrieve(
        self, dataset: Dataset, systems: Sequence[SystemEntry], depth: int | None
    ) -> dict[str, Any | BaseException]:
        """Each system's run (a ``RunResult``), or the exception it failed with."""
        out: dict[str, Any] = {}
        for entry in systems:
            try:
                out[entry.key] = retrieve_entry(dataset, entry, depth)
            except Exception as exc:
                out[entry.key] = exc
        return out

    def latency(self, dataset: Dataset, system: SystemSpec, depth: int | None, runs: int, seed: int) -> dict[str, Any]:
        from irflow.tasks.retrieve.searchers import measure_latency

        latency = measure_latency(dataset, system, depth=depth, num_runs=runs, seed=seed)
        return {k: v for k, v in vars(latency).items() if k not in ("system", "info")}

    def metrics(
        self,
        dataset: Dataset,
        system: str,
        result: Any,
        measures: list[str],
        cost: Mapping[str, Any],
        encodes: Sequence[Mapping[str, Any]],
    ) -> SystemEvaluation:
        return system_evaluation(dataset, system, result, measures, cost, encodes)

    def significance(
        self, evaluations: list[SystemEvaluation], measures: list[str], baseline: str, seed: int
    ) -> pd.DataFrame:
        from irflow.tasks.report.write import per_query_table, significance_table

        return significance_table(per_query_table(evaluations), measures, baseline, seed=seed)

    def calibrate(
        self, evaluations: list[SystemEvaluation], human: Dataset, measures: list[str], baseline: str
    ) -> dict[str, Any]:
        """The judge-only means calibrated by ``human``'s judgements (PPI++): the runs scored again under them."""
        from irflow.tasks.report.calibration import calibration_block
        from irflow.tasks.report.write import per_query_table

        runs = {e.system: e.run for e in evaluations}
        return calibration_block(per_query_table(evaluations), runs, human.qrels, measures, baseline, human.name)


def retrieve_entry(dataset: Dataset, entry: SystemEntry, depth: int | None) -> Any:
    """One system's retrieval: by its spec, or from the run or callable it was given with."""
    from irflow.tasks.retrieve.searchers import retrieve

    return retrieve(dataset, entry.spec, depth, source=entry.source)


def latency_of(
    stages: Stages, dataset: Dataset, entry: SystemEntry, depth: int | None, runs: int, seed: int
) -> dict[str, Any]:
    """The system's latency record; a failing measurement (a service gone after retrieval) fails the system's
    latency only: ``latency_error`` names the reason and its retrieval and metrics are kept. A system given in
    Python is not timed (its run was made elsewhere, or its callable is not irflow's to sample)."""
    if runs <= 0 or entry.source is not None:
        return {}
    try:
        return stages.latency(dataset, entry.spec, depth, runs, seed)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        log.warning("latency of %s failed, its other results are kept: %s", entry.name, error)
        return {"latency_error": error}


def embedding_failures(specs: Sequence[str], embedded: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The systems that need an encoding that failed with a named error, and that error."""
    from irflow.tasks.systems import as_spec, walk

    final = {dense: e["error"] for dense, e in embedded.items() if e.get("final")}
    return {system: final[str(node)] for system in specs for node in walk(as_spec(system)) if str(node) in final}


def human_judgements(stages: Stages, request: EvaluationRequest) -> Dataset | None:
    """``request.human`` loaded: a stored dataset (its split), or a file's judgements (a dataset of qrels alone)."""
    from irflow.tasks.core.paths import file_or_dataset
    from irflow.tasks.ingest import judgements_dataset

    if request.human is None:
        return None
    if file_or_dataset(request.human) == "file":
        return judgements_dataset(Path(request.human).expanduser(), request.split or "test")
    return stages.ingest(request.human, request.split)


def run_evaluation(request: EvaluationRequest, stages: Stages | None = None) -> Evaluation:
    """Evaluate ``request`` stage by stage (``stages``: in this process by default). A failing system does not
    lose the others: it is listed in ``Evaluation.failed``; when every system fails, :class:`SystemsFailed`."""
    from irflow.tasks.report import analyse
    from irflow.tasks.report.calibration import check_human
    from irflow.tasks.report.coverage import condensed_first
    from irflow.tasks.report.recommendations import verdict
    from irflow.tasks.report.write import results_document
    from irflow.tasks.systems import leaves

    stages = stages or Stages()
    data = request.dataset if isinstance(request.dataset, Dataset) else stages.ingest(request.dataset, request.split)
    human = human_judgements(stages, request)
    if human is not None:
        check_human(data, human)
    measures = condensed_first(data.manifest.get("source", {}), list(request.metrics))  # clicks or pools
    searched = [e.key for e in request.systems if e.source is None]
    embedded = stages.embed(data, searched) if searched else {}
    failed = embedding_failures(searched, embedded)
    results = stages.retrieve(data, [e for e in request.systems if e.key not in failed], request.depth)
    evaluations: list[SystemEvaluation] = []
    infos: dict[str, Any] = {}
    for entry in request.systems:
        result = results.get(entry.key)
        if entry.key in failed or result is None:
            continue
        if isinstance(result, BaseException):
            failed[entry.key] = f"{type(result).__name__}: {result}"
            continue
        infos[entry.key] = result.info
        cost = latency_of(stages, data, entry, request.depth, request.latency_runs, request.seed)
        encodes = [embedded[str(leaf)] for leaf in leaves(entry.spec) if str(leaf) in embedded]
        evaluations.append(stages.metrics(data, entry.key, result, measures, cost, encodes))
    if not evaluations:
        raise SystemsFailed("every system failed: " + "; ".join(f"{s}: {e}" for s, e in failed.items()))
    base = request.baseline if request.baseline not in failed else evaluations[0].system
    comparisons = stages.significance(evaluations, measures, base, request.seed)
    calibration = stages.calibrate(evaluations, human, measures, base) if human is not None else None
    stored = results_document(
        data,
        evaluations,
        measures,
        request.depth,
        baseline=base,
        calibration=calibration,
        labels=request.labels,
        seed=request.seed,
    )
    if failed:
        stored.document["failed"] = failed
    report_dataset = data if len(data.corpus) else None  # judgements alone: no segments, lengths or snippets
    report = analyse(stored, report_dataset, comparisons=comparisons)
    return Evaluation.from_results(
        stored,
        report.comparisons,
        verdict(stored.document, report).replace("`", ""),
        dataset=report_dataset,
        report=report,
        infos=infos,
        embedded=embedded,
    )


__all__ = ["Stages", "SystemsFailed", "embedding_failures", "run_evaluation", "system_evaluation"]
