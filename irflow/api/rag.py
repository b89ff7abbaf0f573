"""``irflow.evaluate_rag``: a RAG pipeline's answers evaluated in one call, as ``irflow rag`` does.

One implementation, in three modules: ``rag_request`` (:func:`validate_rag` checks the arguments),
``rag_pipeline`` (:func:`run_rag` composes the stages, each pluggable through :class:`RagStages`; the ``rag``
flow passes the same functions wrapped as Prefect tasks and adds the result folder's publishing and tracking)
and ``rag_evaluation`` (:class:`RagEvaluation`, the typed result and its folder). This module is the front
door and re-exports them. No Prefect and no MLflow unless ``track=True``.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from irflow.api._results import check_flag, check_int
from irflow.api.rag_evaluation import FILES, RagEvaluation
from irflow.api.rag_pipeline import (
    RagParts,
    RagStages,
    calibrate,
    generate_answers,
    read_answers_file,
    run_rag,
    score_answers,
    significance,
    write_rag,
)
from irflow.api.rag_request import DEFAULT_K, MAX_K, RagRequest, configuration_names, validate_rag
from irflow.tasks.core.schema import InputError, UnknownNameError


def evaluate_rag(
    dataset: str = "techdocs",
    *,
    answers: Sequence[str | Path] | None = None,
    systems: Sequence[str] | None = None,
    generator: str | None = None,
    judge: str | None = None,
    metrics: Sequence[str] | None = None,
    baseline: str | None = None,
    depth: int | None = None,
    human: str | Path | None = None,
    split: str | None = None,
    embedder: str | None = None,
    judge_repeats: int = 1,
    seed: int = 0,
    track: bool = False,
    experiment: str = "irflow",
) -> RagEvaluation:
    """Evaluate a RAG pipeline's answers on ``dataset`` (``irflow rag``).

    Either ``answers`` (answers files, JSON lines ``{query_id, answer, contexts, reference?}``; one
    configuration each) or ``systems`` (spec strings) with a ``generator`` (``extractive``,
    ``python:MODULE:CALLABLE`` or ``openai:MODEL``) fed each system's top ``depth`` contexts (default 5).
    ``judge``: the LLM judge of the judged metrics; ``human``: verdicts that calibrate it (PPI++).
    ``track``: log to MLflow as ``irflow rag`` does.
    """
    if not isinstance(dataset, str) or not dataset:
        raise InputError(f"dataset={dataset!r}: expected a dataset name such as 'techdocs'")
    for name, value in (("answers", answers), ("systems", systems), ("metrics", metrics)):
        if isinstance(value, str | Path):
            raise InputError(f"{name}={str(value)!r}: expected a list, e.g. {name}=[{str(value)!r}]")
    files = [str(a) for a in answers or ()]
    for f in files:
        if not Path(f).is_file():
            raise InputError(f"answers: no such file {f!r}; expected JSON lines {{query_id, answer, contexts}}")
    k = DEFAULT_K if depth is None else depth
    seed = check_int("seed", seed, 0, "the seed of the bootstrap and the paired tests")
    track = check_flag("track", track)
    try:
        specs, parsed, chosen, names, base = validate_rag(
            dataset,
            list(systems or ()),
            files,
            generator,
            k,
            list(metrics) if metrics is not None else None,
            judge,
            judge_repeats,
            baseline,
            str(human) if human is not None else None,
        )
    except (InputError, UnknownNameError) as exc:  # the same checks as the command, in the API's words
        message = str(exc).replace("--k ", "depth ").replace("--answers FILE", "answers=[FILE]")
        for option in ("system", "generator", "metric", "judge-repeats", "judge", "baseline", "human", "answers"):
            message = message.replace(f"--{option}", option.replace("-", "_"))
        raise InputError(message.replace("irflow rag takes", "evaluate_rag takes")) from None
    from irflow.tasks.core import run_identity

    name = run_identity.run_name(dataset, ["rag", *names])
    request = RagRequest(
        dataset,
        tuple(specs),
        tuple(files),
        parsed,
        k,
        tuple(chosen),
        tuple(names),
        split,
        base or names[0],
        judge,
        embedder,
        judge_repeats,
        seed,
        name,
        str(human) if human is not None else None,
    )
    if track:
        from irflow.tasks.tracking import check_tracking

        check_tracking(experiment=experiment)
    parts = run_rag(request)
    with tempfile.TemporaryDirectory(prefix="irflow-rag-") as folder:  # the document as the folder holds it
        document = write_rag(Path(folder) / "result", parts, request.metrics, request.baseline)
        if track:
            from irflow.tasks.tracking import Tracker
            from irflow.tasks.tracking.rag import log_rag

            log_rag(Tracker(experiment), str(Path(folder) / "result"), run_name=name, tags={}, seed=seed)
    return RagEvaluation.from_parts(document, parts)


__all__ = [
    "DEFAULT_K",
    "FILES",
    "MAX_K",
    "RagEvaluation",
    "RagParts",
    "RagRequest",
    "RagStages",
    "calibrate",
    "configuration_names",
    "evaluate_rag",
    "generate_answers",
    "read_answers_file",
    "run_rag",
    "score_answers",
    "significance",
    "validate_rag",
    "write_rag",
]
