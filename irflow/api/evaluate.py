"""``irflow.evaluate``: one call from a notebook to everything ``irflow run`` computes, typed.

No Prefect and no MLflow unless asked: a call with the defaults imports neither. ``track=True`` logs the
result folder to MLflow as ``irflow run`` does (an evaluation run and a run per system).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from irflow.api.evaluation import Evaluation
from irflow.api.pipeline import run_evaluation
from irflow.api.request import Run, SystemInput, make_request
from irflow.tasks.core.schema import Dataset


def evaluate(
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
    track: bool = False,
    output: str | Path | None = None,
    experiment: str = "irflow",
) -> Evaluation:
    """Evaluate ``systems`` on ``dataset``, in this process; returns an :class:`~irflow.api.Evaluation`.

    ``dataset``: a stored dataset name (``irflow datasets list``; default the demo ``techdocs``) or a loaded
    :class:`~irflow.tasks.core.schema.Dataset`. ``systems``: spec strings as ``--system`` (default bm25, dense
    and hybrid), or a mapping label -> spec string, run (``{query_id: {doc_id: score}}`` or a DataFrame
    ``query_id, doc_id, score``) or callable ``(queries, k) -> hits`` (the ``python:`` protocol). ``qrels``:
    with in-memory runs, the judgements (``{query_id: {doc_id: grade}}`` or a DataFrame); no corpus is needed
    then. ``baseline``: a label or a spec (default the first system). ``human``: human judgements of some
    queries, a stored dataset's name or a file (a qrels file or a filled sheet): the means are calibrated by
    them (PPI++). ``output``: also write the result folder
    there. ``track``: log to MLflow (experiment ``experiment``) as ``irflow run`` does.

    Every argument is checked before anything loads; a bad one raises :class:`~irflow.InputError`.
    """
    request = make_request(
        dataset,
        systems,
        qrels=qrels,
        metrics=metrics,
        baseline=baseline,
        depth=depth,
        split=split,
        human=human,
        seed=seed,
        latency_runs=latency_runs,
    )
    if track:
        from irflow.tasks.tracking.log import check_tracking

        check_tracking(experiment=experiment)  # a store that cannot be written fails now, before any stage
    started = int(time.time() * 1000)
    evaluation = run_evaluation(request)
    if output is None and not track:
        return evaluation
    with _folder(output) as folder:
        evaluation.save(folder)
        if track:
            evaluation = track_evaluation(evaluation, folder, experiment=experiment, started_ms=started)
    return evaluation


@contextlib.contextmanager
def _folder(output: str | Path | None) -> Iterator[Path]:
    if output is not None:
        yield Path(output)
        return
    with tempfile.TemporaryDirectory(prefix="irflow-") as tmp:  # MLflow keeps the files: the folder may go
        yield Path(tmp) / "result"


def track_evaluation(
    evaluation: Evaluation,
    folder: str | Path,
    *,
    experiment: str = "irflow",
    run_name: str | None = None,
    parent: str | None = None,
    tags: Mapping[str, str] | None = None,
    started_ms: int | None = None,
) -> Evaluation:
    """Log a saved evaluation (its result ``folder``) to MLflow: an evaluation run and a run per system; the
    folder's metrics.json then names the run. Returns the evaluation with :attr:`Evaluation.tracking`."""
    from irflow.tasks.core.atomic import write_json
    from irflow.tasks.tracking import log as tracking

    tracker = tracking.Tracker(experiment)
    encoded = evaluation._parts.encodings
    fresh = {s: e for s, e in encoded.items() if not e.get("cached")}
    logged = tracking.log_evaluation(
        tracker,
        folder,
        infos=evaluation._parts.retrieval_info,
        labels={spec: label for label, spec in evaluation.systems.items()},
        failed=evaluation.to_dict().get("failed") or {},
        parent=parent,
        tags=tags,
        seeds={"seed.significance": _seed(evaluation), "seed.latency": _seed(evaluation)},
        run_name=run_name or evaluation.name or default_run_name(evaluation),
        start_time=started_ms,
        encode_rates={
            s: e["encoded"] / e["seconds"] for s, e in fresh.items() if e.get("encoded") and e.get("seconds")
        },
        metrics={
            "documents_encoded": float(sum(e.get("encoded", 0) for e in fresh.values())),
            "embed_stages_cached": float(sum(bool(e.get("cached")) for e in encoded.values())),
        },
    )
    block = {
        "run_id": logged.run_id,
        "experiment_id": tracker.experiment_id,
        "experiment": tracker.experiment,
        "systems": logged.systems,
        "url": logged.url,
        "runs_url": logged.runs_url,
    }
    evaluation = evaluation.recorded(mlflow=block)
    write_json(Path(folder) / "metrics.json", evaluation.to_dict())  # names its MLflow run
    return evaluation


def default_run_name(evaluation: Evaluation) -> str:
    """The run's name from its dataset, systems and time, as ``irflow run`` names its runs."""
    from irflow.tasks.core.run_identity import run_name

    return run_name(evaluation.dataset, list(evaluation.systems))


def _seed(evaluation: Evaluation) -> int:
    return int(evaluation.to_dict().get("significance", {}).get("seed", 0))


def load_dataset(name: str, split: str | None = None) -> Dataset:
    """A stored dataset (``irflow datasets list``), downloaded or ingested first when needed: corpus, queries
    and qrels as DataFrames, with its manifest."""
    from irflow.tasks.ingest import load_dataset as load
    from irflow.tasks.ingest.names import check_dataset_name, check_split

    check_dataset_name(name, "name")
    check_split(name, split)
    return load(name, split)


__all__ = ["evaluate", "load_dataset", "track_evaluation"]
