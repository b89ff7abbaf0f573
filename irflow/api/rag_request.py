"""The arguments of a RAG evaluation, checked once (:func:`validate_rag`) and carried typed (:class:`RagRequest`):
what ``irflow rag`` and :func:`irflow.evaluate_rag` both check before any model or corpus loads."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.rag import answers as answer_files
from irflow.tasks.rag.generate import Generator, parse_generator
from irflow.tasks.rag.id_based import ID_METRICS
from irflow.tasks.rag.judged import LLM_METRICS

DEFAULT_K = 5
MAX_K = 100


def configuration_names(answers: Sequence[str]) -> list[str]:
    """An answers file's configuration name: its stem (its path when two files share a stem)."""
    stems = [Path(a).stem for a in answers]
    return [stem if stems.count(stem) == 1 else str(a) for stem, a in zip(stems, answers, strict=True)]


def validate_rag(
    dataset: str,
    systems: Sequence[str],
    answers: Sequence[str],
    generator: str | None,
    k: int,
    metrics: Sequence[str] | None,
    judge: str | None,
    judge_repeats: int,
    baseline: str | None,
    human: str | None = None,
) -> tuple[list[str], Generator | None, list[str], list[str], str | None]:
    """Canonical system specs, the generator, the metric names, the configuration names and the baseline;
    every error names the option and what it expects, before any work."""
    from irflow.tasks.experiment import check_models
    from irflow.tasks.ingest import check_name
    from irflow.tasks.llm import make_llm
    from irflow.tasks.rag.calibrate import check_verdicts_file, read_human_verdicts
    from irflow.tasks.systems.specs import as_spec

    check_name(dataset)
    if bool(systems) == bool(answers):
        raise InputError("irflow rag takes --answers FILE (repeatable) or --system SPEC (repeatable) with --generator")
    for path in answers:
        answer_files.check_answers_path(path)  # a directory or a device named now, before any work
    if systems and generator is None:
        raise InputError("--system needs --generator SPEC (extractive, python:MODULE:CALLABLE or openai:MODEL)")
    if answers and generator is not None:
        raise InputError("--generator goes with --system; --answers already holds the answers")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_K:
        raise InputError(f"--k expects an integer from 1 to {MAX_K} (contexts per question), got {k!r}")
    if isinstance(judge_repeats, bool) or not isinstance(judge_repeats, int) or judge_repeats < 1:
        raise InputError(f"--judge-repeats expects an integer >= 1, got {judge_repeats!r}")
    specs = list(dict.fromkeys(str(as_spec(s)) for s in systems))
    check_models(specs)
    parsed = parse_generator(generator) if generator is not None else None
    if judge is not None:
        make_llm(judge, "--judge", "judge")  # a bad spec fails now; nothing is called
    if human is not None:
        check_verdicts_file(human)  # a file: a stored dataset judges documents, not answers
        if judge is None:
            raise InputError("--human calibrates the LLM-judged metrics: it needs --judge SPEC")
        read_human_verdicts(human)  # every row checked now, errors naming file:line
    known = (*ID_METRICS, *LLM_METRICS)
    chosen = list(dict.fromkeys(metrics or (*ID_METRICS, *(LLM_METRICS if judge else ()))))
    for m in chosen:
        if m not in known:
            raise UnknownNameError(f"--metric: unknown RAG metric {m!r}; available: {', '.join(known)}")
    if judge is None and any(m not in ID_METRICS for m in chosen):
        raise InputError(f"--metric {', '.join(m for m in chosen if m not in ID_METRICS)} needs --judge SPEC")
    names = specs or configuration_names(answers)
    if baseline is not None:
        base = str(as_spec(baseline)) if specs else baseline
        if not specs and baseline in answers:
            base = names[list(answers).index(baseline)]
        if base not in names:
            raise InputError(f"--baseline {baseline!r} is not one of the configurations: {', '.join(names)}")
        baseline = base
    return specs, parsed, chosen, names, baseline


@dataclass(frozen=True)
class RagRequest:
    """A checked RAG evaluation (:func:`validate_rag`'s results): what :func:`run_rag` composes."""

    dataset: str
    specs: tuple[str, ...]
    answers: tuple[str, ...]
    generator: Generator | None
    k: int
    metrics: tuple[str, ...]
    names: tuple[str, ...]
    split: str | None
    baseline: str
    judge: str | None
    embedder: str | None
    judge_repeats: int
    seed: int
    name: str  # the run's name (metrics.json's ``run.name``)
    human: str | None = None


__all__ = ["DEFAULT_K", "MAX_K", "RagRequest", "configuration_names", "validate_rag"]
