"""The calibration block of metrics.json and its report.md section: judge-labelled means corrected by
human labels (PPI++, :mod:`irflow.tasks.compare.calibration`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from irflow.tasks.compare.calibration import calibrate_systems
from irflow.tasks.core.ids import check_known
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.metrics import evaluate
from irflow.tasks.report.format import md_table, num, signed

HALF_WIDTH = 0.02  # the target half-width the labels-needed figure is for


def calibration_block(
    judge: pd.DataFrame,
    runs: Mapping[str, pd.DataFrame],
    human_qrels: pd.DataFrame,
    measures: list[str],
    baseline: str | None,
    human: str,
) -> dict[str, Any]:
    """``{"calibrated": {system: {metric: ...}}, "calibration": {...}}`` for metrics.json: ``judge`` is the
    long per-query table under the judge's qrels, ``runs`` the systems' runs, scored here again under
    ``human_qrels`` (only the queries ``judge`` holds) of the dataset named ``human``."""
    queries = set(judge["query_id"])
    human_qrels = human_qrels[human_qrels["query_id"].isin(queries)]
    frames = [evaluate(run, human_qrels, measures).assign(system=system) for system, run in runs.items()]
    labelled = pd.concat(frames, ignore_index=True) if frames and len(human_qrels) else judge.iloc[:0]
    blocks, notes = calibrate_systems(judge, labelled, baseline, half_width=HALF_WIDTH)
    return {
        "calibrated": blocks,
        "calibration": {"human": human, "method": "PPI++ (power-tuned)", "half_width": HALF_WIDTH, "notes": notes},
    }


def _interval(block: Mapping[str, Any], sign: str = "") -> str:
    """``estimate [low, high]``; ``sign="+"`` for a difference."""
    show = signed if sign == "+" else num
    return f"{show(block['estimate'])} [{show(block['ci'][0])}, {show(block['ci'][1])}]"


def calibration_section(document: Mapping[str, Any]) -> list[str]:
    """report.md's "Calibrated by human labels" section (nothing when the run had no ``--human``)."""
    blocks, about = document.get("calibrated"), document.get("calibration")
    if not blocks or not about:
        return []
    rows, differences = [], []
    for system, metrics in blocks.items():
        for metric, b in metrics.items():
            needed = b["labels_needed"]
            rows.append(
                [
                    f"`{system}`",
                    metric,
                    f"{num(b['judge_only'])}",
                    _interval(b),
                    f"{num(b['lambda'], 2)}",
                    "not reachable" if needed is None else f"{needed:,}",
                ]
            )
            if d := b.get("difference"):
                differences.append(
                    [
                        f"`{system}`",
                        metric,
                        f"{signed(d['judge_only'])} ({d['judge_only_conclusion']})",
                        _interval(d, "+"),
                    ]
                    + [d["conclusion"] + ("" if d["conclusion"] == d["judge_only_conclusion"] else " **(differs)**")]
                )
    first = next(iter(next(iter(blocks.values())).values()))
    lines = [
        "## Calibrated by human labels",
        "",
        f"The judgements of this dataset are a judge's; `{about['human']}` holds human judgements of "
        f"{first['n_human']} of its queries ({first['n_judge_only']} more are judged by the judge only). "
        "Calibrated: the prediction-powered (PPI++) estimate of the mean under human judgements and its 95% "
        f"interval; λ is the weight the judge earned (0: ignored, 1: trusted). Human labels: the human-judged "
        f"queries needed for a ±{about['half_width']} interval (not reachable: the judge-only queries alone "
        "vary more than that, so more queries are needed, not only more labels).",
        "",
        *md_table(["system", "metric", "judge only", "calibrated [95% CI]", "λ", "human labels"], rows, "llrrrr"),
        "",
    ]
    if differences:
        lines += [
            f"Differences against the baseline `{document.get('baseline')}`, judge only and calibrated:",
            "",
            *md_table(["system", "metric", "judge only", "calibrated [95% CI]", "conclusion"], differences, "llrrl"),
            "",
        ]
    lines += [f"> **Note.** {note}" for note in about.get("notes", [])]
    return lines + ([""] if about.get("notes") else [])


def check_human(judged: Dataset, human: Dataset) -> None:
    """Refuse, before any work, a human dataset that cannot calibrate ``judged``: none of its query or
    document ids is ``judged``'s, fewer than 2 of its judged queries are ``judged``'s, or none is left to the
    judge alone; ids ``judged`` lacks are named in a warning (they are left out)."""
    where = f"--human {human.name}"
    check_known(
        human.qrels["query_id"], set(judged.queries["query_id"]), "query", f"the queries of {judged.name}", where
    )
    check_known(
        human.qrels["doc_id"], set(judged.corpus["doc_id"]), "document", f"the documents of {judged.name}", where
    )
    queries = set(judged.qrels["query_id"])
    shared = queries & set(human.qrels["query_id"])
    if len(shared) < 2 or len(shared) == len(queries):
        raise InputError(
            f"--human {human.name}: judges {len(shared)} of the {len(queries)} queries of {judged.name}; "
            "expected human judgements of at least 2 of them, and fewer than all (the rest are the judge's alone)"
        )


def calibration_text(document: Mapping[str, Any]) -> str:
    """The calibrated means for a terminal: one line per system and metric, then the notes."""
    blocks, about = document.get("calibrated") or {}, document.get("calibration") or {}
    lines = [
        f"calibrated by {about.get('human')} (PPI++, 95% CI; human-judged queries for ±{about.get('half_width')}):"
    ]
    for system, metrics in blocks.items():
        for metric, b in metrics.items():
            needed = "not reachable" if b["labels_needed"] is None else f"{b['labels_needed']:,} needed"
            lines.append(
                f"  {system} {metric}: judge only {num(b['judge_only'])}, calibrated {_interval(b)} "
                f"(λ {num(b['lambda'], 2)}, {b['n_human']} human-judged, {needed})"
            )
    lines += [f"note: {note}" for note in about.get("notes", [])]
    return "\n".join(lines)
