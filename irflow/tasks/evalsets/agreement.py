"""Judge against human: how far a judge's grades (an LLM, zELO, clicks) are from human grades.

Measured on the (query, document) pairs both graded: the confusion matrix (rows: human grade, columns:
judge grade), Cohen's kappa unweighted and with quadratic weights, Krippendorff's ordinal alpha (the ones
in :mod:`irflow.tasks.evalsets.pool`), each grade's precision and recall taking the human grade as the
truth, and the judge's mean bias (mean judge grade − mean human grade; > 0: the judge is lenient).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import InputError
from irflow.tasks.evalsets.pool import cohen_kappa, krippendorff_alpha

__all__ = ["agreement_text", "judge_agreement", "paired_grades"]


def paired_grades(judge: pd.DataFrame, human: pd.DataFrame) -> pd.DataFrame:
    """The pairs both qrels grade: ``query_id``, ``doc_id``, ``judge``, ``human`` (ints). Raises naming the
    cause when none is shared."""
    columns = ["query_id", "doc_id", "relevance"]
    both = judge[columns].merge(human[columns], on=["query_id", "doc_id"], suffixes=("_judge", "_human"))
    if both.empty:
        shared = len(set(judge["query_id"]) & set(human["query_id"]))
        raise InputError(
            f"the judge's and the human qrels share no (query, document) pair ({shared} shared queries); "
            "expected human judgements of documents the judge graded"
        )
    both = both.rename(columns={"relevance_judge": "judge", "relevance_human": "human"})
    return both.astype({"judge": "int64", "human": "int64"}).sort_values(["query_id", "doc_id"], ignore_index=True)


def _number(value: float) -> float | None:
    """NaN (undefined) as None, for JSON."""
    return None if math.isnan(value) else float(value)


def judge_agreement(judge: pd.DataFrame, human: pd.DataFrame) -> dict[str, Any]:
    """Agreement of ``judge``'s qrels with ``human``'s on the pairs both grade, as a JSON-ready dict:
    ``pairs``, ``queries``, ``grades``, ``confusion`` (human grade → judge grade → count), ``kappa``,
    ``kappa_quadratic``, ``alpha_ordinal``, ``per_grade`` (grade → precision, recall, support; None
    where undefined), ``mean_judge``, ``mean_human``, ``bias``."""
    pairs = paired_grades(judge, human)
    h, j = pairs["human"].to_numpy(), pairs["judge"].to_numpy()
    grades = sorted({int(g) for g in np.concatenate([h, j])})
    confusion = pd.crosstab(pairs["human"], pairs["judge"]).reindex(index=grades, columns=grades, fill_value=0)
    per_grade = {}
    for g in grades:
        hit = int(confusion.loc[g, g])
        called, truly = int(confusion[g].sum()), int(confusion.loc[g].sum())
        per_grade[str(g)] = {
            "precision": hit / called if called else None,
            "recall": hit / truly if truly else None,
            "support": truly,
        }
    return {
        "pairs": len(pairs),
        "queries": int(pairs["query_id"].nunique()),
        "grades": grades,
        "confusion": {str(g): {str(k): int(confusion.loc[g, k]) for k in grades} for g in grades},
        "kappa": _number(cohen_kappa(h, j)),
        "kappa_quadratic": _number(cohen_kappa(h, j, weights="quadratic")),
        "alpha_ordinal": _number(krippendorff_alpha(np.column_stack([h, j]), "ordinal")),
        "per_grade": per_grade,
        "mean_judge": float(j.mean()),
        "mean_human": float(h.mean()),
        "bias": float(j.mean() - h.mean()),
    }


def agreement_text(figures: dict[str, Any]) -> str:
    """``figures`` (from :func:`judge_agreement`) as lines for a terminal."""

    def show(value: float | None) -> str:
        return "undefined" if value is None else f"{value:.3f}"

    grades = figures["grades"]
    width = max(5, *(len(str(g)) for g in grades))
    rows = [(g, figures["confusion"][str(g)]) for g in grades]
    lines = [
        f"{figures['pairs']} (query, document) pairs graded by both, over {figures['queries']} queries",
        f"Cohen's kappa {show(figures['kappa'])}, quadratic-weighted {show(figures['kappa_quadratic'])}, "
        f"Krippendorff's alpha (ordinal) {show(figures['alpha_ordinal'])}",
        f"judge's mean bias {figures['bias']:+.3f} (mean judge grade {figures['mean_judge']:.3f}, "
        f"human {figures['mean_human']:.3f})",
        "",
        "confusion (rows: human grade, columns: judge grade)",
        " " * width + "".join(f"{g:>{width + 1}}" for g in grades),
        *(f"{g:>{width}}" + "".join(f"{row[str(k)]:>{width + 1}}" for k in grades) for g, row in rows),
        "",
        "grade  precision  recall  support",
        *(
            f"{g:>5}  {show(v['precision']):>9}  {show(v['recall']):>6}  {v['support']:>7}"
            for g, v in ((g, figures["per_grade"][str(g)]) for g in grades)
        ),
    ]
    return "\n".join(lines)
