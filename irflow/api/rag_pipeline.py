"""A checked RAG evaluation composed stage by stage (:func:`run_rag`): ingest, embed and retrieve, answers files
or generation, scoring, paired tests, calibration, each stage pluggable (:class:`RagStages`: the pure functions
here; the ``rag`` flow passes the same functions wrapped as Prefect tasks); :func:`write_rag` writes the result
folder. Nothing here tracks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api._stages import embed, ingest, retrieve
from irflow.api.rag_request import RagRequest
from irflow.tasks.core.schema import Dataset
from irflow.tasks.rag import answers as answer_files
from irflow.tasks.rag.generate import Generator, check_replies, generate
from irflow.tasks.rag.id_based import relevant_ids
from irflow.tasks.rag.judged import LLM_METRICS
from irflow.tasks.rag.samples import Answer
from irflow.tasks.rag.score import DEFAULT_EMBEDDER, Configuration, Judge, Scores, paired_tests, score, summary


def read_answers_file(
    path: str, name: str, dataset: Dataset, references: dict[str, str]
) -> tuple[Configuration, dict[str, Any]]:
    """An answers file as a configuration, with what was left out of it."""
    read = answer_files.read_answers(path, dataset, references)
    identity = {"answers_file": str(path), "answers": len(read.answers)}
    return Configuration(name, read.answers, identity), read.problems()


def generate_answers(
    dataset: Dataset,
    system: str,
    run: pd.DataFrame,
    generator: Generator,
    k: int,
    ask: Any,
    references: dict[str, str],
) -> Configuration:
    """The system's top ``k`` of every judged query into the generator: one configuration."""
    contexts = answer_files.top_contexts(run, dataset, k)
    asked = answer_files.questions(dataset)
    qids = [q for q in dataset.queries["query_id"].astype(str) if q in contexts or q in asked]
    items = [(asked[q], contexts.get(q, ())) for q in qids]
    replies = generate(generator, items, ask)
    check_replies(generator, system, replies)  # every call failed: an error, not a run of empty answers
    answers = [
        Answer(q, asked[q], r.text or "", contexts.get(q, ()), references.get(q))
        for q, r in zip(qids, replies, strict=True)
    ]
    unanswered = {q: str(r.error) for q, r in zip(qids, replies, strict=True) if r.text is None}
    identity = {"system": system, "k": k, **{f"generator_{k}": v for k, v in generator.describe().items()}}
    return Configuration(system, answers, identity, unanswered)


def score_answers(
    configs: list[Configuration],
    metrics: list[str],
    relevant: dict[str, set[str]],
    judge: Judge | None,
    asks: list[Any],
) -> Scores:
    """Every metric of every configuration (:func:`irflow.tasks.rag.score.score`)."""
    return score(configs, metrics, relevant, judge=judge, asks=asks)


def significance(per_query: pd.DataFrame, metrics: list[str], baseline: str, seed: int) -> pd.DataFrame:
    """Every configuration against the baseline (:func:`irflow.tasks.rag.score.paired_tests`)."""
    return paired_tests(per_query, metrics, baseline, seed=seed)


def calibrate(scores: Scores, human: str, baseline: str) -> dict[str, Any]:
    """The LLM-judged means calibrated by human verdicts (PPI++, :func:`~irflow.tasks.rag.calibrate.calibrate_answers`);
    a sample the judge failed on is passed as missing, never as a score."""
    from irflow.tasks.rag.calibrate import calibrate_answers, read_human_verdicts

    failed = scores.failures.drop(columns="error").assign(value=float("nan"))
    judged = pd.concat([scores.per_query, failed], ignore_index=True)
    judged = judged[judged["metric"].isin(LLM_METRICS)]
    return calibrate_answers(judged, read_human_verdicts(human), baseline, source=human)


@dataclass(frozen=True)
class RagStages:
    """Each stage of :func:`run_rag`; the defaults run in this process, the flow passes Prefect tasks."""

    ingest: Callable[[str, str | None], Dataset] = ingest
    embed: Callable[[Dataset, Sequence[str]], Any] = embed
    retrieve: Callable[[Dataset, str, int | None], Any] = retrieve
    answers: Callable[[str, str, Dataset, dict[str, str]], tuple[Configuration, dict[str, Any]]] = read_answers_file
    generate: Callable[..., Configuration] = generate_answers
    score: Callable[..., Scores] = score_answers
    significance: Callable[[pd.DataFrame, list[str], str, int], pd.DataFrame] = significance
    calibrate: Callable[[Scores, str, str], dict[str, Any]] = calibrate


@dataclass(frozen=True)
class RagParts:
    """What :func:`run_rag` computed: everything the result folder is written from."""

    dataset: Dataset
    configs: list[Configuration]
    scores: Scores
    summary: dict[str, Any]
    comparisons: pd.DataFrame
    extra: dict[str, Any]


def run_rag(request: RagRequest, stages: RagStages = RagStages()) -> RagParts:
    """The RAG evaluation of a checked request, stage by stage (nothing written, nothing tracked)."""
    from irflow.tasks.llm import make_llm
    from irflow.tasks.rag.llm import CachedAsk, Usage, answer_cache
    from irflow.tasks.rag.score import bind_judge

    generator, metrics, judge = request.generator, list(request.metrics), request.judge
    judge_fn = bind_judge(request.embedder or DEFAULT_EMBEDDER) if judge is not None else None
    cache = answer_cache()
    usage: dict[str, Usage] = {}
    gen_ask = None
    if generator is not None and generator.kind == "llm":
        usage["generation"] = Usage()
        gen_ask = CachedAsk(
            make_llm(generator.target, "--generator", "generator", free_text=True), cache, usage["generation"]
        )
    asks: list[CachedAsk] = []
    if judge is not None:
        usage["judging"] = Usage()
        first = CachedAsk(make_llm(judge, "--judge", "judge"), cache, usage["judging"])
        asks = [first.again(r) for r in range(request.judge_repeats)]
    data = stages.ingest(request.dataset, request.split)
    if request.human is not None:  # verdicts on queries or configurations this run does not have: named now
        from irflow.tasks.rag.calibrate import check_verdicts, read_human_verdicts

        check_verdicts(read_human_verdicts(request.human), data, list(request.names), request.human)
    references = answer_files.dataset_references(data)
    configs: list[Configuration] = []
    problems: dict[str, Any] = {}
    if request.specs:
        assert generator is not None
        stages.embed(data, list(request.specs))
        for system in request.specs:
            result: Any = stages.retrieve(data, system, max(request.k, 10))
            configs.append(stages.generate(data, system, result.run, generator, request.k, gen_ask, references))
    else:
        for path, config_name in zip(request.answers, request.names, strict=True):
            config, skipped = stages.answers(path, config_name, data, references)
            configs.append(config)
            if skipped:
                problems[config_name] = skipped
    relevant = relevant_ids(data.qrels)
    scores = stages.score(configs, metrics, relevant, judge_fn, asks)
    comparisons = stages.significance(scores.per_query, metrics, request.baseline, request.seed)
    calibration = stages.calibrate(scores, request.human, request.baseline) if request.human is not None else {}
    extra: dict[str, Any] = {
        "usage": {stage: u.as_dict() for stage, u in usage.items()},
        "options": {
            "k": request.k if request.specs else None,
            "generator": generator.spec if generator else None,
            "judge": judge,
            "embedder": request.embedder,
            "judge_repeats": request.judge_repeats,
            "seed": request.seed,
        },
        **({"answers_file_problems": problems} if problems else {}),
        **calibration,
        "run": {"name": request.name},
    }
    return RagParts(data, configs, scores, summary(scores, metrics, seed=request.seed), comparisons, extra)


def write_rag(output: str | Path, parts: RagParts, metrics: Sequence[str], baseline: str) -> dict[str, Any]:
    """Write the result folder ``output`` whole (exactly what ``irflow rag`` writes); returns metrics.json's content."""
    from irflow.tasks.rag.outputs import write_rag_outputs

    return write_rag_outputs(
        output,
        parts.dataset,
        parts.configs,
        parts.scores,
        parts.summary,
        parts.comparisons,
        list(metrics),
        baseline,
        parts.extra,
    )


__all__ = [
    "RagParts",
    "RagStages",
    "calibrate",
    "generate_answers",
    "read_answers_file",
    "run_rag",
    "score_answers",
    "significance",
    "write_rag",
]
