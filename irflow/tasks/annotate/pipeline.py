"""The annotation pipeline as plain functions: candidates → pairs → judges → ensemble → BT → outputs.

``flows/annotate.py`` runs these steps as Prefect tasks; scripts and tests call :func:`annotate`.
Everything lives in one output folder, so a rerun with the same folder resumes::

    config.json        the settings (no secrets)
    pairs.parquet      the persisted pairs (+ pairs.json: what they were drawn from)
    votes.jsonl        every judge's vote, appended durably (tasks.annotate.store)
    pairs_judged.parquet  the ensemble outcome of each pair, with each judge's score
    zelo.parquet       per document: query_id, doc_id, rank, score (zELO), battles, grade
    annotated.jsonl    zbench AnnotatedQueryDocuments
    qrels.trec         graded qrels (the zbench import's mapping)
    summary.json       counts, convergence, agreement, benchmarks
    plots/             pair matrices and the score distribution
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.annotate import benchmark as bench
from irflow.tasks.annotate import bradley_terry, ensemble, outputs, plots
from irflow.tasks.annotate.battle import PROMPT_SHA256, PROMPT_VERSION, Judge, JudgesFailedError
from irflow.tasks.annotate.candidates import Texts, draw_anchors, select_candidates
from irflow.tasks.annotate.config import AnnotateConfig
from irflow.tasks.annotate.judges import make_judge, parse_judge
from irflow.tasks.annotate.pairs import load_or_make_pairs
from irflow.tasks.annotate.runner import CostEstimate, JudgeStats, check_judges, estimate_cost, run_judges
from irflow.tasks.annotate.store import VoteStore, read_votes
from irflow.tasks.core.atomic import atomic_path, write_json
from irflow.tasks.core.schema import Dataset, InputError

log = logging.getLogger(__name__)

PLOTTED_QUERIES = 4


@dataclass
class Plan:
    """What an annotation works on; built without a single judge call."""

    config: AnnotateConfig
    dataset: Dataset
    candidates: pd.DataFrame
    pairs: pd.DataFrame
    texts: Texts
    judges: list[Judge]
    anchors: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["query_id", "doc_id", "rank"]))

    @property
    def folder(self) -> Path:
        return Path(self.config.output)


@dataclass
class Annotation:
    """The fitted annotation: pair outcomes, per-document scores and grades, convergence per query."""

    combined: pd.DataFrame
    scores: pd.DataFrame
    convergence: pd.DataFrame
    votes: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)
    anchor_scores: pd.DataFrame | None = None  # the anchors' scores, when the plan has anchors


def plan(config: AnnotateConfig, dataset: Dataset | None = None, *, store: bool = True) -> Plan:
    """Load the dataset, pick candidates, draw (or reload) the pairs, set up the judges; ``store=False``
    (a dry run) writes nothing into the output folder."""
    from irflow.tasks.ingest import load_dataset

    for spec in config.judges:
        parse_judge(spec)  # bad specs fail before anything is loaded
    if config.ensemble not in ensemble.METHODS:
        raise InputError(f"ensemble must be one of {', '.join(ensemble.METHODS)}, not {config.ensemble!r}")
    if not config.prior > 0 or config.cycles < 1:
        raise InputError(f"prior must be > 0 and cycles >= 1, got prior={config.prior}, cycles={config.cycles}")
    dataset = dataset or load_dataset(config.dataset, config.split)
    candidates = select_candidates(dataset, config.system, config.k, config.queries)
    anchors = draw_anchors(dataset, candidates, config.anchors, config.seed)
    folder = Path(config.output)
    pairs = load_or_make_pairs(folder, _with(candidates, anchors), config.cycles, config.seed, store=store)
    judges = [
        make_judge(spec, dataset=dataset, candidates=candidates, price_per_1k=config.price_per_1k)
        for spec in config.judges
    ]
    check_judges(judges)
    if store:
        write_json(
            folder / "config.json",
            {
                **asdict(config),
                "prompt_version": PROMPT_VERSION,
                "prompt_sha256": PROMPT_SHA256,
                "dataset_fingerprint": dataset.fingerprint,
            },
        )
    return Plan(config, dataset, candidates, pairs, Texts.of(dataset), judges, anchors)


def _with(candidates: pd.DataFrame, anchors: pd.DataFrame) -> pd.DataFrame:
    """The documents that battle: the candidates, and the anchors when there are any."""
    return pd.concat([candidates, anchors], ignore_index=True) if len(anchors) else candidates


def estimate(p: Plan) -> CostEstimate:
    """Calls left and their estimated cost (votes already in the store are not counted)."""
    return estimate_cost(p.pairs, p.texts, p.judges, read_votes(p.folder / "votes.jsonl"))


def judge(p: Plan) -> JudgeStats:
    """Get every missing vote into ``votes.jsonl`` (resumes; see tasks.annotate.runner)."""
    with VoteStore(p.folder / "votes.jsonl") as store:
        return run_judges(p.pairs, p.texts, p.judges, store, seed=p.config.seed)


def current_votes(votes: pd.DataFrame, judges: list[Judge]) -> pd.DataFrame:
    """Votes of these judges at their current version (a changed prompt or scale does not mix in)."""
    wanted = {(j.name, j.version) for j in judges}
    return votes[[(n, v) in wanted for n, v in zip(votes["judge"], votes["version"])]].reset_index(drop=True)


def fit(p: Plan) -> Annotation:
    """Ensemble outcomes per pair and Bradley–Terry scores per query, with grades (zbench mapping)."""
    votes = current_votes(read_votes(p.folder / "votes.jsonl"), p.judges)
    names = [j.name for j in p.judges]
    check_every_judge_voted(votes, names, len(p.pairs))
    combined = ensemble.combine(p.pairs, votes, names, p.config.ensemble)
    scores, convergence = bradley_terry.fit_queries(_with(p.candidates, p.anchors), combined, prior=p.config.prior)
    if not len(p.anchors):
        return Annotation(combined, scores, convergence, votes)
    keys = scores["query_id"].astype(str) + "\0" + scores["doc_id"].astype(str)
    is_anchor = keys.isin(set(p.anchors["query_id"].astype(str) + "\0" + p.anchors["doc_id"].astype(str)))
    real, anchors = scores[~is_anchor].reset_index(drop=True), scores[is_anchor].reset_index(drop=True)
    return Annotation(combined, real, convergence, votes, anchor_scores=anchors)


def check_every_judge_voted(votes: pd.DataFrame, judges: list[str], pairs: int) -> None:
    """Raise JudgesFailedError when a judge has no valid vote on any pair: its every call failed
    (a wrong model name, a refused request), and grades fitted without it would be silently wrong."""
    if pairs == 0:
        return
    for name in judges:
        mine = votes[votes["judge"] == name]
        if not mine["score"].notna().any():
            errors = mine["error"].dropna()
            example = f"; e.g. {errors.mode().iloc[0]}" if len(errors) else ""
            raise JudgesFailedError(
                f"judge {name} has no valid vote on any of {pairs} pairs ({len(mine)} calls failed{example}); "
                "no grades were written: fix the judge and run again (stored votes are reused)"
            )


def write_outputs(p: Plan, a: Annotation, stats: JudgeStats | None = None) -> dict[str, Any]:
    """Write every output file and the summary; returns the summary."""
    folder = p.folder
    names = [j.name for j in p.judges]
    annotated = outputs.write_annotated(folder / "annotated.jsonl", a.scores, p.texts, p.dataset)
    qrels = outputs.graded_qrels(annotated)
    calibration = None
    if a.anchor_scores is not None:
        qrels, calibration = outputs.calibrate(qrels, a.scores, a.anchor_scores, p.config.anchor_threshold)
    outputs.write_trec_qrels(folder / "qrels.trec", qrels)
    a.scores = a.scores.merge(qrels.rename(columns={"relevance": "grade"}), on=["query_id", "doc_id"], how="left")
    _parquet(folder / "zelo.parquet", a.scores)
    _parquet(folder / "pairs_judged.parquet", a.combined)
    shown = a.scores.groupby("query_id")["doc_id"].count().sort_values(ascending=False, kind="stable")
    plots.plot_pair_matrices(
        folder / "plots" / "pair_matrix.png", a.scores, a.combined, sorted(shown.index[:PLOTTED_QUERIES])
    )
    plots.plot_score_distribution(folder / "plots" / "score_distribution.png", a.scores)

    valid = a.votes["score"].notna()
    summary: dict[str, Any] = {
        "dataset": {"name": p.dataset.name, "split": p.dataset.split, "fingerprint": p.dataset.fingerprint},
        "candidates": {
            "system": p.config.system or "dataset candidates table",
            "k": p.config.k,
            "queries": int(p.candidates["query_id"].nunique()),
            "documents": len(p.candidates),
        },
        "pairs": len(p.pairs),
        "cycles": p.config.cycles,
        "seed": p.config.seed,
        "ensemble": p.config.ensemble,
        "prior": p.config.prior,
        "prompt_version": PROMPT_VERSION,
        "prompt_sha256": PROMPT_SHA256,
        "judges": {j.name: j.describe() for j in p.judges},
        "votes": {
            "valid": {n: int((valid & (a.votes["judge"] == n)).sum()) for n in names},
            "missing": {n: int((~valid & (a.votes["judge"] == n)).sum()) for n in names},
            "pairs_without_outcome": int(a.combined["p_b"].isna().sum()),
        },
        "this_run": stats.as_dict() if stats else None,
        "bradley_terry": {
            "converged": bool(a.convergence["converged"].all()) if len(a.convergence) else True,
            "max_iterations": int(a.convergence["iterations"].max()) if len(a.convergence) else 0,
            "max_change": float(a.convergence["change"].max()) if len(a.convergence) else 0.0,
        },
        "inter_judge_agreement": ensemble.inter_judge_agreement(a.combined, names),
        "grades": {str(g): int(n) for g, n in qrels["relevance"].value_counts().sort_index().items()},
        "calibration": calibration,
    }
    if len(p.dataset.qrels):
        summary["human_grades"] = human_agreement(p, a)
    if p.config.benchmark:
        summary["benchmarks"] = benchmark_systems(p, a, p.config.benchmark)
    a.summary = _finite(summary)
    write_json(folder / "summary.json", a.summary)
    return a.summary


def human_agreement(p: Plan, a: Annotation) -> dict[str, Any]:
    """How the annotation agrees with the dataset's own (human) grades: per judge and ensemble on the
    battles, and the zELO ranking's pairwise accuracy / nDCG against the grades on the candidates."""
    names = [j.name for j in p.judges]
    grades = _human_truth(p)
    zelo = bench.summarise(
        bench.benchmark(grades, a.scores[["query_id", "doc_id", "score"]], ks=p.config.ks, gain="linear")
    )
    return {"battles": ensemble.agreement_with_grades(a.combined, p.dataset.qrels, names), "zelo_vs_grades": zelo}


def benchmark_systems(p: Plan, a: Annotation, systems: tuple[str, ...]) -> dict[str, Any]:
    """Each system's measures against the zELO annotation (and, where the dataset has them, the human grades)."""
    from irflow.tasks.systems.specs import as_spec

    truth = a.scores[["query_id", "doc_id", "score"]]
    grades = _human_truth(p) if len(p.dataset.qrels) else None
    out = {}
    for system in systems:
        name = str(as_spec(system))
        predicted = bench.system_predictions(p.dataset, name)
        entry = {"vs_zelo": bench.summarise(bench.benchmark(truth, predicted, ks=p.config.ks))}
        if grades is not None:
            entry["vs_grades"] = bench.summarise(bench.benchmark(grades, predicted, ks=p.config.ks, gain="linear"))
        out[name] = entry
    return out


def _human_truth(p: Plan) -> pd.DataFrame:
    """The candidates with the dataset's grades as truth scores; an unjudged candidate is grade 0."""
    merged = p.candidates.merge(
        p.dataset.qrels.astype({"query_id": "str", "doc_id": "str"}), on=["query_id", "doc_id"], how="left"
    )
    return merged.assign(score=merged["relevance"].fillna(0).astype(np.float64))[["query_id", "doc_id", "score"]]


def annotate(config: AnnotateConfig, dataset: Dataset | None = None) -> dict[str, Any]:
    """The whole pipeline without Prefect: plan, judge (resuming), fit, write; returns the summary."""
    p = plan(config, dataset)
    log.info("annotation plan:\n%s", estimate(p).text())
    stats = judge(p)
    return write_outputs(p, fit(p), stats)


def _parquet(path: Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def _finite(obj: Any) -> Any:
    """JSON-safe: NaN and infinities become None."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj
