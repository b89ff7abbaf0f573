"""Score the configurations' answers: per-query values, failures, means with CIs, judge noise, paired tests.

A configuration is one way of answering (a system's top k into a generator, or a team's answers file).
Every sample gets a value or a failure with its reason (no NaN, never a 0 or 1 in its place): means,
intervals and paired tests are over the valued samples only, and a paired test over the queries valued in
both configurations. LLM-judged metrics are asked ``repeats`` times (repeat r > 0 is a call of its own):
the per-query value is the mean over the repeats that gave one, and the run-to-run standard deviation
of the metric's mean (over queries valued in every repeat) measures the judge's noise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.compare.significance import COMPARISON_COLUMNS, bootstrap_ci, compare_all, correct
from irflow.tasks.rag.id_based import ID_METRICS, id_based
from irflow.tasks.rag.judged import judge as judge_metric
from irflow.tasks.rag.samples import Answer, Ask

Judge = Callable[[str, Sequence[Answer], Ask], Sequence[Any]]
"""``judge(metric, answers, ask)`` -> one result per answer with ``value``, ``error`` and ``detail``
(:func:`irflow.tasks.rag.judged.judge` with its embedder bound)."""


DEFAULT_EMBEDDER = "minilm"  # answer relevancy's embedding model (STACK.md: the local MiniLM)


def bind_judge(embedder: str = DEFAULT_EMBEDDER) -> Judge:
    """:func:`irflow.tasks.rag.judged.judge` with the embedding model ``embedder`` (any irflow model alias,
    local or API) bound for answer relevancy; the model is resolved now and loaded on first use."""
    from irflow.tasks.embed.inference import encode
    from irflow.tasks.embed.models import resolve_model

    model = resolve_model(embedder)

    def embed(texts: Sequence[str]) -> np.ndarray:
        return encode(model, list(texts), prompt="", max_seq_length=None)

    def judge(metric: str, answers: Sequence[Answer], ask: Ask) -> list[Any]:
        return judge_metric(metric, answers, ask, embed)

    return judge


@dataclass(frozen=True)
class Configuration:
    """One configuration's answers; ``unanswered`` maps a query to why its generation failed."""

    name: str
    answers: list[Answer]
    identity: dict[str, Any] = field(default_factory=dict)
    unanswered: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Scores:
    """The long tables of a scoring: values, failures, the judge's verdicts, and the per-repeat means."""

    per_query: pd.DataFrame  # system, query_id, metric, value
    failures: pd.DataFrame  # system, query_id, metric, error
    verdicts: dict[tuple[str, str, str], Any] = field(default_factory=dict)  # (system, metric, query) -> detail
    repeat_sd: dict[str, dict[str, float]] = field(default_factory=dict)  # system -> metric -> sd of the mean


def score(
    configs: Sequence[Configuration],
    metrics: Sequence[str],
    relevant: Mapping[str, set[str]],
    *,
    judge: Judge | None = None,
    asks: Sequence[Ask] = (),
) -> Scores:
    """Every metric of every configuration; LLM metrics (not in :data:`ID_METRICS`) need ``judge`` and one
    ``ask`` per repeat."""
    values: list[tuple[str, str, str, float]] = []
    failures: list[tuple[str, str, str, str]] = []
    verdicts: dict[tuple[str, str, str], Any] = {}
    repeat_sd: dict[str, dict[str, float]] = {}
    for config in configs:
        for metric in metrics:
            if metric in ID_METRICS:
                for a, (v, err) in zip(config.answers, id_based(metric, config.answers, relevant), strict=True):
                    _add(values, failures, config.name, a.query_id, metric, v, err)
                continue
            if judge is None or not asks:
                raise ValueError(f"the LLM-judged metric {metric} needs a judge")
            answered = [a for a in config.answers if a.query_id not in config.unanswered]
            for qid, why in config.unanswered.items():
                failures.append((config.name, qid, metric, f"no answer: {why}"))
            runs = [list(judge(metric, answered, ask)) for ask in asks]
            for i, a in enumerate(answered):
                got = [r[i].value for r in runs if r[i].value is not None]
                errors = [r[i].error for r in runs if r[i].value is None]
                v = float(np.mean(got)) if got else None
                _add(values, failures, config.name, a.query_id, metric, v, None if got else str(errors[0]))
                verdicts[(config.name, metric, a.query_id)] = runs[0][i].detail
            every = [i for i in range(len(answered)) if all(r[i].value is not None for r in runs)]
            if len(runs) > 1 and every:
                means = [float(np.mean([r[i].value for i in every])) for r in runs]
                repeat_sd.setdefault(config.name, {})[metric] = float(np.std(means, ddof=1))
    per_query = pd.DataFrame(values, columns=["system", "query_id", "metric", "value"])
    return Scores(
        per_query.astype({"value": "float64"}),
        pd.DataFrame(failures, columns=["system", "query_id", "metric", "error"]),
        verdicts,
        repeat_sd,
    )


def _add(values: list[Any], failures: list[Any], system: str, qid: str, metric: str, v: Any, err: Any) -> None:
    if v is None:
        failures.append((system, qid, metric, str(err)))
    else:
        values.append((system, qid, metric, float(v)))


def summary(scores: Scores, metrics: Sequence[str], *, alpha: float = 0.05, seed: int = 0) -> dict[str, Any]:
    """``{system: {metric: {mean, ci_low, ci_high, n, failed, repeat_sd}}}``: the mean over valued samples,
    its bootstrap interval (BCa, :func:`~irflow.tasks.compare.significance.bootstrap_ci`)."""
    out: dict[str, Any] = {}
    systems = list(dict.fromkeys([*scores.per_query["system"], *scores.failures["system"]]))
    for system in systems:
        block: dict[str, Any] = {}
        for metric in metrics:
            pq = scores.per_query
            v = pq[(pq["system"] == system) & (pq["metric"] == metric)]["value"].to_numpy()
            fails = scores.failures
            failed = int(((fails["system"] == system) & (fails["metric"] == metric)).sum())
            row: dict[str, Any] = {"mean": None, "ci_low": None, "ci_high": None, "n": int(v.size), "failed": failed}
            if v.size:
                row["mean"] = float(v.mean())
                if v.size > 1:
                    low, high = bootstrap_ci(v, 10_000, alpha, np.random.default_rng(seed))
                    row["ci_low"], row["ci_high"] = low, high
            if metric in scores.repeat_sd.get(system, {}):
                row["repeat_sd"] = scores.repeat_sd[system][metric]
            block[metric] = row
        out[system] = block
    return out


def paired_tests(
    per_query: pd.DataFrame, metrics: Sequence[str], baseline: str, *, seed: int = 0, alpha: float = 0.05
) -> pd.DataFrame:
    """Every configuration against ``baseline`` on each metric (:func:`~irflow.tasks.compare.significance.compare_all`),
    each pair on the queries valued in both (a failed sample is left out, not scored 0)."""
    frames = []
    systems = list(dict.fromkeys(per_query["system"]))
    if baseline not in systems:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    for system in systems:
        if system == baseline:
            continue
        for metric in metrics:
            rows = per_query[(per_query["metric"] == metric) & per_query["system"].isin([baseline, system])]
            counts = rows.groupby("query_id")["system"].nunique()
            both = rows[rows["query_id"].isin(counts[counts == 2].index)]
            if both["query_id"].nunique() < 2:
                continue
            frames.append(compare_all(both, [metric], baseline, seed=seed, alpha=alpha))
    if not frames:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    table = pd.concat(frames, ignore_index=True)
    for _, rows in table.groupby("metric"):  # one family per metric over every candidate (Holm)
        table.loc[rows.index, "p_adjusted"] = correct(rows["p_randomization"].tolist(), "holm")
    table["significant"] = table["p_adjusted"] < alpha
    return table
