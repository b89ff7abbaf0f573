"""The judge of RAG answers, calibrated by human verdicts on some of them (issue 26, item 4).

A human verdict file holds rows ``query_id``, ``metric`` (one of the LLM-judged metrics), ``value`` and
optionally ``system`` (JSON Lines or CSV; every row checked, errors name the file and line). For every
system and metric, with labelled = the answers both the judge and a human scored and unlabelled = the
answers only the judge scored, :func:`calibrate_answers` gives the PPI++ estimate of the human mean with
power tuning, its interval and the human labels needed for a target half-width (computed by
:mod:`irflow.tasks.compare.calibration`, the same code as ``irflow run --human``), the same for the paired
difference against a baseline system, and how far the judge is from the humans where both exist
(:func:`answer_agreement`). An answer the judge could not score has no judge value: it is neither labelled
nor unlabelled (never a 0), and it is counted.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from irflow.tasks.compare.calibration import calibrate_systems
from irflow.tasks.core.ids import check_known
from irflow.tasks.core.paths import describe_path, file_or_dataset, regular_file
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.evalsets.pool import krippendorff_alpha
from irflow.tasks.ingest.names import check_dataset_name
from irflow.tasks.ingest.readers import iter_jsonl, require_id
from irflow.tasks.rag.judged import LLM_METRICS
from irflow.tasks.report.calibration import HALF_WIDTH

__all__ = [
    "VERDICTS_FILE",
    "agreement_lines",
    "answer_agreement",
    "calibrate_answers",
    "check_verdicts",
    "check_verdicts_file",
    "read_human_verdicts",
]

COLUMNS = ["system", "query_id", "metric", "value"]


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    if path.suffix.lower() == ".csv":
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = {"query_id", "metric", "value"} - set(reader.fieldnames or [])
            if missing:
                raise InputError(
                    f"the header lacks {', '.join(sorted(missing))}; expected columns query_id, metric, value "
                    "and optionally system",
                    path=str(path),
                    line=1,
                )
            for row in reader:
                yield reader.line_num, {k: v for k, v in row.items() if v not in (None, "")}
    elif path.suffix.lower() in (".jsonl", ".json"):
        yield from iter_jsonl(path)
    else:
        raise InputError(f"unknown human verdict format {path.suffix!r}; expected .jsonl or .csv", path=str(path))


def _value(raw: Any, metric: str, path: Path, line: int) -> float:
    low = -1.0 if metric == "answer_relevancy" else 0.0  # a cosine may be negative
    try:
        value = float(raw) if not isinstance(raw, bool) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not low <= value <= 1.0:
        raise InputError(f"field 'value' is {raw!r}; expected a number from {low:g} to 1", path=str(path), line=line)
    return value


VERDICTS_FILE = "a file of human verdicts on answers (JSONL or CSV: query_id, metric, value, system?)"


def check_verdicts_file(human: str | Path) -> None:
    """``--human`` of a RAG evaluation names a file: a stored dataset holds judgements of documents, not verdicts
    on answers, so a dataset's name is refused saying so (a misspelt file: "no such file")."""
    text = str(human)
    if file_or_dataset(text) == "file":
        what = describe_path(Path(text).expanduser())
        if what is not None:
            raise InputError(f"--human {text}: {what}; expected {VERDICTS_FILE}")
        return
    try:
        check_dataset_name(text, "--human")
    except InputError:
        raise InputError(f"--human {text}: no such file; expected {VERDICTS_FILE}") from None
    raise InputError(
        f"--human {text}: a stored dataset judges documents, not answers, so it cannot calibrate RAG metrics; "
        f"expected {VERDICTS_FILE}"
    )


def read_human_verdicts(path: str | Path) -> pd.DataFrame:
    """Human verdicts as rows ``system`` (None when the file names none), ``query_id``, ``metric``, ``value``;
    a malformed row, an unknown metric or a second verdict for the same answer and metric fails naming the
    file and line."""
    path = regular_file(path, "human verdicts (.jsonl or .csv)")
    rows: list[tuple[str | None, str, str, float]] = []
    seen: dict[tuple[str | None, str, str], int] = {}
    for line, obj in _rows(path):
        query_id = require_id(obj, "query_id", path, line)
        metric = obj.get("metric")
        if metric not in LLM_METRICS:
            raise InputError(
                f"field 'metric' is {metric!r}; expected one of {', '.join(LLM_METRICS)}", path=str(path), line=line
            )
        system = obj.get("system")
        if system is not None and not isinstance(system, str):
            raise InputError(f"field 'system' is {system!r}; expected a system name", path=str(path), line=line)
        key = (system, query_id, metric)
        if key in seen:
            raise InputError(
                f"a second verdict on {metric} of query {query_id!r}{f' by {system}' if system else ''} "
                f"(the first is on line {seen[key]}); expected one per answer and metric",
                path=str(path),
                line=line,
            )
        seen[key] = line
        rows.append((system, query_id, metric, _value(obj.get("value"), metric, path, line)))
    if not rows:
        raise InputError("no human verdicts; expected rows with query_id, metric, value", path=str(path))
    return pd.DataFrame(rows, columns=COLUMNS)


def check_verdicts(human: pd.DataFrame, dataset: Dataset, configurations: Sequence[str], source: str) -> None:
    """Human verdicts (:func:`read_human_verdicts`) on queries ``dataset`` lacks, or naming configurations the
    run does not have: an error when none is known, else a warning naming how many and a few (they are left out)."""
    check_known(
        human["query_id"],
        set(dataset.queries["query_id"].astype(str)),
        "query",
        f"the queries of {dataset.name}",
        source,
    )
    named = human["system"].dropna()
    if len(named):
        check_known(
            named, set(configurations), "system", f"this run's configurations ({', '.join(configurations)})", source
        )


def _assign_systems(human: pd.DataFrame, systems: list[str]) -> pd.DataFrame:
    """Rows naming no system belong to the run's only system; with several, each row must name one."""
    unnamed = human["system"].isna()
    if unnamed.any():
        if len(systems) != 1:
            raise InputError(
                f"{int(unnamed.sum())} human verdicts name no system, but the run has {len(systems)} "
                f"({', '.join(systems)}); expected a 'system' field on every verdict"
            )
        human = human.assign(system=human["system"].fillna(systems[0]))
    return human


def answer_agreement(judge: pd.Series, human: pd.Series) -> dict[str, Any]:
    """How far judge scores are from human verdicts on the same answers (two aligned series): ``n``,
    ``mean_judge``, ``mean_human``, ``bias`` (judge − human; > 0: lenient), ``mae``, Pearson's ``r``,
    Spearman's ``rho`` and Krippendorff's interval ``alpha`` (None where undefined, e.g. constant scores)."""
    j, h = judge.to_numpy(np.float64), human.to_numpy(np.float64)

    def defined(value: float) -> float | None:
        return None if math.isnan(value) else float(value)

    varied = j.size >= 2 and np.ptp(j) > 0 and np.ptp(h) > 0
    pooled = np.concatenate([j, h])
    return {
        "n": int(j.size),
        "mean_judge": float(j.mean()),
        "mean_human": float(h.mean()),
        "bias": float(j.mean() - h.mean()),
        "mae": float(np.abs(j - h).mean()),
        "r": defined(stats.pearsonr(j, h).statistic) if varied else None,
        "rho": defined(stats.spearmanr(j, h).statistic) if varied else None,
        "alpha_interval": defined(krippendorff_alpha(np.column_stack([h, j]), "interval"))
        if np.ptp(pooled) > 0
        else None,
    }


def agreement_lines(calibration: dict[str, Any]) -> list[str]:
    """The judge-vs-human figures of ``calibrate_answers(...)["calibration"]``, one line per system and
    metric (for a terminal or report.md), then what was left unused."""

    def show(value: float | None, form: str = ".2f") -> str:
        return "undefined" if value is None else format(value, form)

    lines = []
    for system, metrics in calibration.get("agreement", {}).items():
        for metric, a in metrics.items():
            lines.append(
                f"judge vs human, {system} {metric} on {a['n']} answers: bias {a['bias']:+.3f}, MAE {a['mae']:.3f}, "
                f"r {show(a['r'])}, rho {show(a['rho'])}, alpha (interval) {show(a['alpha_interval'])}"
            )
    counts = calibration.get("counts", {})
    if counts.get("judge_failed"):
        lines.append(f"{counts['judge_failed']} human verdicts unused: the judge failed on those answers")
    if counts.get("unknown"):
        examples = ", ".join(counts["unknown_examples"])
        lines.append(f"{counts['unknown']} human verdicts unused: answers the run does not have (e.g. {examples})")
    return lines


def calibrate_answers(
    judged: pd.DataFrame,
    human: pd.DataFrame,
    baseline: str | None = None,
    *,
    source: str = "human verdicts",
    half_width: float = HALF_WIDTH,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """PPI++ per system and metric of the judge's per-answer scores (``judged``: ``system``, ``query_id``,
    ``metric``, ``value``; value None/NaN where judging failed) corrected by ``human`` verdicts (from
    :func:`read_human_verdicts`, read from ``source``).

    Returns the metrics.json blocks that :mod:`irflow.tasks.report.calibration` renders: ``calibrated``
    ({system: {metric: block}}, blocks as ``calibrate_systems``'s: ``estimate``, ``ci``, ``judge_only``,
    ``n_human``, ``n_judge_only``, ``lambda``, ``labels_needed`` and, against ``baseline``, ``difference``)
    and ``calibration``: ``human`` (= ``source``), ``method``, ``half_width``, ``notes`` (where calibrated
    and judge-only conclusions differ, and what could not be calibrated and why), ``agreement`` ({system:
    {metric: answer_agreement}}) and ``counts`` (human verdicts used, on answers the judge failed on, on
    answers the run does not have)."""
    judged = judged.astype({"value": np.float64})
    systems = sorted(judged["system"].unique())
    human = _assign_systems(human, systems)
    scored = judged.dropna(subset=["value"])
    keys = ["system", "query_id", "metric"]
    both = human.merge(judged, on=keys, how="left", suffixes=("_human", "_judge"), indicator=True)
    unknown = both[both["_merge"] == "left_only"]
    failed = both[(both["_merge"] == "both") & both["value_judge"].isna()]
    paired = both.dropna(subset=["value_judge"])
    notes: list[str] = []
    agreement: dict[str, dict[str, Any]] = {}
    for (system, metric), group in paired.groupby(["system", "metric"], sort=True):
        agreement.setdefault(system, {})[metric] = answer_agreement(group["value_judge"], group["value_human"])
    calibrated: dict[str, dict[str, Any]] = {}
    for (system, metric), group in scored.groupby(["system", "metric"], sort=True):
        labels = human[(human["system"] == system) & (human["metric"] == metric)]
        try:
            blocks, _ = calibrate_systems(group[COLUMNS], labels[COLUMNS], half_width=half_width, alpha=alpha)
        except InputError as err:
            notes.append(f"{metric}, {system}: not calibrated: {err}")
            continue
        block = blocks[system][metric]
        if baseline is not None and system != baseline:
            difference = _difference(scored, human, (system, baseline, metric), half_width, alpha, notes)
            if difference is not None:
                block["difference"] = difference
        calibrated.setdefault(system, {})[metric] = block
    counts = {
        "human": len(human),
        "paired": len(paired),
        "judge_failed": len(failed),
        "unknown": len(unknown),
        "unknown_examples": [f"{r.system}/{r.query_id}" for r in unknown.head(5).itertuples()],
    }
    about = {"human": source, "method": "PPI++ (power-tuned)", "half_width": half_width, "notes": notes}
    return {"calibrated": calibrated, "calibration": {**about, "agreement": agreement, "counts": counts}}


def _difference(
    scored: pd.DataFrame,
    human: pd.DataFrame,
    which: tuple[str, str, str],
    half_width: float,
    alpha: float,
    notes: list[str],
) -> dict[str, Any] | None:
    """The calibrated paired difference ``system − baseline`` (``which`` = system, baseline, metric) on the
    answers the judge scored for both, labelled where humans judged both; None (with a note) when too few."""
    system, baseline, metric = which
    pair = scored[scored["system"].isin([system, baseline]) & (scored["metric"] == metric)]
    shared = pair.groupby("query_id")["system"].nunique().loc[lambda n: n == 2].index
    labels = human[human["system"].isin([system, baseline]) & (human["metric"] == metric)]
    labelled = labels.groupby("query_id")["system"].nunique().loc[lambda n: n == 2].index
    try:
        blocks, found = calibrate_systems(
            pair[pair["query_id"].isin(shared)][COLUMNS],
            labels[labels["query_id"].isin(labelled)][COLUMNS],
            baseline,
            half_width=half_width,
            alpha=alpha,
        )
    except InputError as err:
        notes.append(f"{metric}, {system} against {baseline}: not calibrated: {err}")
        return None
    notes.extend(found)
    return dict(blocks[system][metric]["difference"])
