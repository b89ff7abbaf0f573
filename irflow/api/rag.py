"""``irflow.evaluate_rag``: a RAG pipeline's answers evaluated in one call, as ``irflow rag`` does.

One implementation: :func:`validate_rag` checks the arguments, :func:`run_rag` composes the stages
(ingest, embed and retrieve, answers files or generation, scoring, paired tests, calibration) with each
stage pluggable (:class:`RagStages`: the pure functions here; the ``rag`` flow passes the same functions
wrapped as Prefect tasks and adds the result folder's publishing and tracking). No Prefect and no MLflow
unless ``track=True``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from irflow.api._results import FrameEquality, check_flag, check_int, flatten, html_page
from irflow.api._stages import embed, ingest, retrieve
from irflow.tasks.core.schema import Dataset, InputError, UnknownNameError
from irflow.tasks.rag import answers as answer_files
from irflow.tasks.rag.generate import Generator, check_replies, generate, parse_generator
from irflow.tasks.rag.id_based import ID_METRICS, relevant_ids
from irflow.tasks.rag.judged import LLM_METRICS
from irflow.tasks.rag.outputs import config_labels
from irflow.tasks.rag.samples import Answer
from irflow.tasks.rag.score import DEFAULT_EMBEDDER, Configuration, Judge, Scores, paired_tests, score, summary

DEFAULT_K = 5
MAX_K = 100
FILES = ("metrics.json", "per_query.parquet", "failures.csv", "answers.jsonl", "significance.csv", "report.md")


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


# ---------------------------------------------------------------------------------------------------------
# the stages (pure; the flow wraps each as a Prefect task)


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


# ---------------------------------------------------------------------------------------------------------
# the result


def _tidy(table: pd.DataFrame) -> pd.DataFrame:
    """A table as read back from its file: a fresh result and its loaded copy compare equal."""
    table = table.reset_index(drop=True)
    for column in table.columns:
        values = table[column]
        if values.dtype == object and len(values) and values.isna().all():
            table[column] = values.astype("float64")
        elif values.dtype != object and not pd.api.types.is_numeric_dtype(values):
            table[column] = values.astype(object)
    return table


def _labelled(table: pd.DataFrame, label: Mapping[str, str], *columns: str) -> pd.DataFrame:
    """``table`` with the configurations in ``columns`` named by their labels."""
    named = {c: table[c].map(lambda v: label[v] if isinstance(v, str) else v) for c in columns if c in table}
    return table.assign(**named) if named else table


@dataclass(frozen=True, eq=False)
class RagEvaluation(FrameEquality):
    """A RAG evaluation (``irflow rag``). Configurations are named by their labels (``dense:all-MiniLM-L6-v2``; an
    answers file's name as it is) in every table and the verdict; ``summary``'s ``spec`` column names the spec.

    ``means``: configuration × metric (the mean over the samples with a value); ``summary``: one row per
    configuration and metric with ``mean, ci_low, ci_high, n, failed`` (and ``repeat_sd`` with judge
    repeats); ``per_sample``: ``system, query_id, metric, value``; ``comparisons``: every configuration
    against the baseline (significance.csv); ``failures``: ``system, query_id, metric, error``;
    ``calibrated`` (with human verdicts): one row per configuration and metric, the PPI++ estimates.
    """

    dataset: str
    split: str
    configurations: tuple[str, ...]
    metrics: tuple[str, ...]
    baseline: str
    means: pd.DataFrame
    summary: pd.DataFrame
    per_sample: pd.DataFrame
    comparisons: pd.DataFrame
    failures: pd.DataFrame
    calibrated: pd.DataFrame | None
    _document: dict[str, Any] = field(repr=False)
    _parts: RagParts | None = field(default=None, repr=False, compare=False)
    _folder: Path | None = field(default=None, repr=False, compare=False)

    @property
    def verdict(self) -> str:
        """One sentence: the best configuration on the first metric, its difference to the baseline with the
        interval and the Holm-adjusted p (and the calibrated figures with human verdicts): report.md's first
        paragraph, the last line ``irflow rag`` prints."""
        from irflow.tasks.rag.outputs import rag_verdict

        return rag_verdict(self._document, self.comparisons)

    @classmethod
    def _build(
        cls,
        document: Mapping[str, Any],
        per_sample: pd.DataFrame,
        comparisons: pd.DataFrame,
        failures: pd.DataFrame,
        **private: Any,
    ) -> RagEvaluation:
        document = dict(json.loads(json.dumps(document, sort_keys=True, default=str)))
        metrics = tuple(document["measures"])
        label = config_labels(document)  # tables name configurations by label, the spec a column away
        configurations = tuple(label[c] for c in document["configurations"])
        rows = [
            {"configuration": label[c], "spec": c, "metric": m, **document["summary"][c][m]}
            for c in document["summary"]
            for m in metrics
        ]
        summary_table = pd.DataFrame(rows)
        for column in ("mean", "ci_low", "ci_high", "repeat_sd"):
            if column in summary_table:
                summary_table[column] = summary_table[column].astype("float64")
        means = (
            summary_table.pivot(index="configuration", columns="metric", values="mean")
            .reindex(index=[label[c] for c in document["summary"]], columns=list(metrics))
            .rename_axis(index="configuration", columns="metric")
        )
        calibrated = None
        if document.get("calibrated"):
            calibrated = pd.DataFrame(
                [
                    {"configuration": label[c], "metric": m, **flatten(block)}
                    for c, blocks in document["calibrated"].items()
                    for m, block in blocks.items()
                ]
            )
        return cls(
            dataset=document["dataset"]["name"],
            split=document["dataset"]["split"],
            configurations=configurations,
            metrics=metrics,
            baseline=label[document["baseline"]],
            means=means,
            summary=summary_table,
            per_sample=_tidy(_labelled(per_sample, label, "system")),
            comparisons=_tidy(_labelled(comparisons, label, "candidate", "baseline")),
            failures=_tidy(_labelled(failures, label, "system")),
            calibrated=calibrated,
            _document=document,
            **private,
        )

    @classmethod
    def from_parts(cls, document: Mapping[str, Any], parts: RagParts) -> RagEvaluation:
        """The result of a computed evaluation (``document``: its metrics.json content)."""
        return cls._build(document, parts.scores.per_query, parts.comparisons, parts.scores.failures, _parts=parts)

    def save(self, path: str | Path) -> Path:
        """Write exactly the folder ``irflow rag --output PATH`` writes."""
        if self._parts is not None:
            write_rag(path, self._parts, self.metrics, self._document["baseline"])  # the baseline's spec
        elif self._folder is not None:  # a loaded result: its files as they were
            from irflow.tasks.core.output_folder import publish

            with publish(path) as build:
                for name in (*FILES, "report.html"):
                    if (self._folder / name).is_file():
                        shutil.copyfile(self._folder / name, build / name)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path) -> RagEvaluation:
        """Read a folder written by :meth:`save` or ``irflow rag`` back."""
        folder = Path(path)
        missing = [f for f in FILES if not (folder / f).is_file()]
        if missing:
            raise InputError(f"path: not a result folder of irflow rag ({', '.join(missing)} missing)", path=str(path))
        document = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
        if document.get("kind") != "rag":
            raise InputError("path: metrics.json is not a RAG evaluation (write one with irflow rag)", path=str(path))
        ids = {"system": str, "query_id": str, "metric": str}
        return cls._build(
            document,
            pd.read_parquet(folder / "per_query.parquet"),
            pd.read_csv(folder / "significance.csv", float_precision="round_trip", dtype={"metric": str}),
            pd.read_csv(folder / "failures.csv", dtype={**ids, "error": str}, keep_default_na=False),
            _folder=folder,
        )

    def _repr_html_(self) -> str:
        return html_page(f"RAG evaluation: {self.dataset} ({self.split})", self.verdict, self.means)


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
    "MAX_K",
    "RagEvaluation",
    "RagParts",
    "RagRequest",
    "RagStages",
    "configuration_names",
    "evaluate_rag",
    "run_rag",
    "validate_rag",
    "write_rag",
]
