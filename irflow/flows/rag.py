"""The ``rag`` flow: answers (a team's files, or irflow systems' top k into a generator) → RAG metrics,
paired tests, report, MLflow.

Composition only, a task per stage over the pure functions of ``tasks.rag``: ingest, embed and retrieve
(as ``evaluate``'s), answers, generate (one per configuration), score, significance, report, track.
Every argument is checked before any expensive stage; results are published whole.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pandas as pd
from prefect import flow, runtime, task
from prefect.cache_policies import NONE
from prefect.futures import PrefectFuture
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from irflow.flows.evaluate import claim_output, ingest_task, release_output, retrieve_task
from irflow.flows.stages import embed_stage, link_to_mlflow, prefect_tags
from irflow.tasks import tracking
from irflow.tasks.core import run_identity
from irflow.tasks.core.atomic import write_json
from irflow.tasks.core.schema import Dataset, InputError, UnknownNameError
from irflow.tasks.core.stop import stop_on_signal
from irflow.tasks.experiment import check_models
from irflow.tasks.ingest import check_name
from irflow.tasks.rag import answers as answer_files
from irflow.tasks.rag.calibrate import calibrate_answers, check_verdicts, read_human_verdicts
from irflow.tasks.rag.generate import Generator, check_replies, generate, parse_generator
from irflow.tasks.rag.id_based import ID_METRICS, relevant_ids
from irflow.tasks.rag.judged import LLM_METRICS
from irflow.tasks.rag.llm import CachedAsk, Usage, answer_cache, make_llm
from irflow.tasks.rag.outputs import write_rag_outputs
from irflow.tasks.rag.samples import Answer
from irflow.tasks.rag.score import (
    DEFAULT_EMBEDDER,
    Configuration,
    Judge,
    Scores,
    bind_judge,
    paired_tests,
    score,
    summary,
)
from irflow.tasks.systems.specs import as_spec
from irflow.tasks.tracking.log import TrackingOptions, check_tracking
from irflow.tasks.tracking.rag import log_rag

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


@task(name="answers", task_run_name="answers {name}", cache_policy=NONE)
def answers_task(
    path: str, name: str, dataset: Dataset, references: dict[str, str]
) -> tuple[Configuration, dict[str, Any]]:
    read = answer_files.read_answers(path, dataset, references)
    identity = {"answers_file": str(path), "answers": len(read.answers)}
    return Configuration(name, read.answers, identity), read.problems()


@task(name="generate", task_run_name="generate {system}", cache_policy=NONE)
def generate_task(
    dataset: Dataset,
    system: str,
    run: pd.DataFrame,
    generator: Generator,
    k: int,
    ask: CachedAsk | None,
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


@task(name="score", cache_policy=NONE)
def score_task(
    configs: list[Configuration],
    metrics: list[str],
    relevant: dict[str, set[str]],
    judge: Judge | None,
    asks: list[CachedAsk],
) -> Scores:
    return score(configs, metrics, relevant, judge=judge, asks=asks)


@task(name="significance", cache_policy=NONE)
def significance_task(per_query: pd.DataFrame, metrics: list[str], baseline: str, seed: int) -> pd.DataFrame:
    return paired_tests(per_query, metrics, baseline, seed=seed)


@task(name="report", cache_policy=NONE)
def report_task(
    output: str,
    dataset: Dataset,
    configs: list[Configuration],
    scores: Scores,
    metrics: list[str],
    baseline: str,
    comparisons: pd.DataFrame,
    seed: int,
    extra: dict[str, Any],
) -> dict[str, Any]:
    return write_rag_outputs(
        output, dataset, configs, scores, summary(scores, metrics, seed=seed), comparisons, metrics, baseline, extra
    )


@task(name="track", cache_policy=NONE)
def track_task(output: str, options: TrackingOptions, seed: int) -> dict[str, Any]:
    """Log the result folder to MLflow (evaluation run + a run per configuration), linked with this flow run."""
    tracker = tracking.Tracker(options.experiment)
    logged = log_rag(
        tracker,
        output,
        run_name=options.run_name or Path(output).name,
        tags=prefect_tags(),
        seed=seed,
        start_time=options.started_ms,
    )
    link_to_mlflow(tracker, logged.run_id, "evaluation")
    return {"run_id": logged.run_id, "experiment": tracker.experiment, "systems": logged.systems, "url": logged.url}


def rag_flow_run_name() -> str:
    """Prefect's name for a rag flow run: the ``run_name`` parameter, else dataset, configurations and time
    (the run's MLflow and folder name too)."""
    from prefect.runtime import flow_run

    params = flow_run.parameters
    if params.get("run_name"):
        return str(params["run_name"])
    configurations = list(params.get("systems") or ()) or configuration_names(params.get("answers") or ())
    return run_identity.run_name(str(params.get("dataset") or "techdocs"), ["rag", *configurations])


@flow(
    name="rag",
    flow_run_name=rag_flow_run_name,
    task_runner=cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=1)),
)
def rag_flow(
    dataset: str = "techdocs",
    systems: Sequence[str] = (),
    answers: Sequence[str] = (),
    generator: str | None = None,
    k: int = DEFAULT_K,
    metrics: Sequence[str] | None = None,
    split: str | None = None,
    output: str | None = None,
    baseline: str | None = None,
    judge: str | None = None,
    embedder: str | None = None,
    judge_repeats: int = 1,
    human: str | None = None,
    seed: int = 0,
    tracking: TrackingOptions = TrackingOptions(),
    overwrite: bool = False,
    run_name: str | None = None,
) -> dict[str, Any]:
    """Evaluate the answers of every configuration on ``dataset``; returns the metrics document also written
    to ``output`` (default a new ``results/<dataset>/<run name>/``)."""
    specs, parsed, chosen, names, base = validate_rag(
        dataset, systems, answers, generator, k, metrics, judge, judge_repeats, baseline, human
    )
    name = run_name or runtime.flow_run.name or run_identity.run_name(dataset, ["rag", *names])
    claimed = output is None
    output = str(claim_output(dataset, output, overwrite, name))
    try:
        with stop_on_signal():
            return _rag(
                dataset,
                specs,
                list(answers),
                parsed,
                k,
                chosen,
                names,
                split,
                output,
                base or names[0],
                judge,
                embedder,
                judge_repeats,
                seed,
                tracking,
                name,
                human,
            )
    finally:
        if claimed:
            release_output(output)


def _rag(
    dataset: str,
    specs: list[str],
    answers: list[str],
    generator: Generator | None,
    k: int,
    metrics: list[str],
    names: list[str],
    split: str | None,
    output: str,
    baseline: str,
    judge: str | None,
    embedder: str | None,
    repeats: int,
    seed: int,
    tracking: TrackingOptions,
    name: str,
    human: str | None = None,
) -> dict[str, Any]:
    if tracking.enabled:
        check_tracking(experiment=tracking.experiment)
        tracking = tracking.model_copy(update={"run_name": name, "started_ms": int(time.time() * 1000)})
    judge_fn = bind_judge(embedder or DEFAULT_EMBEDDER) if judge is not None else None
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
        asks = [first.again(r) for r in range(repeats)]
    data = ingest_task(dataset, split)
    if human is not None:  # verdicts on queries or configurations this run does not have: named now, not ignored
        check_verdicts(read_human_verdicts(human), data, names, human)
    references = answer_files.dataset_references(data)
    configs: list[Configuration] = []
    problems: dict[str, Any] = {}
    if specs:
        assert generator is not None
        embed_stage(data, specs)
        for system in specs:
            result: Any = retrieve_task(data, system, max(k, 10))
            configs.append(generate_task(data, system, result.run, generator, k, gen_ask, references))
    else:
        for path, config_name in zip(answers, names, strict=True):
            config, skipped = answers_task(path, config_name, data, references)
            configs.append(config)
            if skipped:
                problems[config_name] = skipped
    relevant = relevant_ids(data.qrels)
    scores = score_task(configs, metrics, relevant, judge_fn, asks)
    comparisons = significance_task(scores.per_query, metrics, baseline, seed)
    calibration = calibrate_task(scores, human, baseline) if human is not None else {}
    extra: dict[str, Any] = {
        "usage": {stage: u.as_dict() for stage, u in usage.items()},
        "options": {
            "k": k if specs else None,
            "generator": generator.spec if generator else None,
            "judge": judge,
            "embedder": embedder,
            "judge_repeats": repeats,
            "seed": seed,
        },
        **({"answers_file_problems": problems} if problems else {}),
        **calibration,
        "run": {"name": name},
    }
    document = report_task(output, data, configs, scores, metrics, baseline, comparisons, seed, extra)
    document = {**document, "output": output}
    if run_identity.is_default_output(dataset, output):
        run_identity.point_latest(output)
    if tracking.enabled:
        document = {**document, "mlflow": track_task(output, tracking, seed)}
        write_json(Path(output) / "metrics.json", document)
    with contextlib.suppress(Exception):
        document["run"]["prefect_flow_run_id"] = runtime.flow_run.id
    return document


@task(name="calibrate", cache_policy=NONE)
def calibrate_task(scores: Scores, human: str, baseline: str) -> dict[str, Any]:
    """The LLM-judged means calibrated by human verdicts (PPI++, :func:`~irflow.tasks.rag.calibrate.calibrate_answers`);
    a sample the judge failed on is passed as missing, never as a score."""
    failed = scores.failures.drop(columns="error").assign(value=float("nan"))
    judged = pd.concat([scores.per_query, failed], ignore_index=True)
    judged = judged[judged["metric"].isin(LLM_METRICS)]
    return calibrate_answers(judged, read_human_verdicts(human), baseline, source=human)
