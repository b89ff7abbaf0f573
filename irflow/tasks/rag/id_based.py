"""The RAG metrics that need no LLM: context precision and recall on document ids.

As RAGAS 0.4 defines them (``ragas.metrics.collections.IDBasedContextPrecision`` and
``IDBasedContextRecall``; docs: concepts/metrics/available_metrics/context_precision.md and
context_recall.md), with the dataset's judgements as the reference ids (relevant = grade ≥ 1):

* ``id_based_context_precision`` = |R ∩ G| / |R|: the share of the retrieved context ids that are relevant;
* ``id_based_context_recall`` = |R ∩ G| / |G|: the share of the relevant ids that were retrieved;

where R is the set of the contexts' document ids and G the set of the query's relevant ids. RAGAS returns
NaN when a denominator is empty; here such a sample has no value and a reason instead (a failure the
report counts and names), never a NaN and never a 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from irflow.tasks.rag.samples import Answer

ID_METRICS = ("id_based_context_precision", "id_based_context_recall")
RELEVANT_GRADE = 1


def relevant_ids(qrels: pd.DataFrame, level: int = RELEVANT_GRADE) -> dict[str, set[str]]:
    """Each judged query's relevant document ids (grade ≥ ``level``)."""
    rel = qrels[qrels["relevance"] >= level]
    return {str(q): set(map(str, g["doc_id"])) for q, g in rel.groupby("query_id")}


def id_based(
    metric: str, answers: Sequence[Answer], relevant: Mapping[str, set[str]]
) -> list[tuple[float | None, str | None]]:
    """One ``(value, error)`` per answer for ``metric`` (one of :data:`ID_METRICS`); error None when valued."""
    out: list[tuple[float | None, str | None]] = []
    for a in answers:
        retrieved = {c.doc_id for c in a.contexts if c.doc_id is not None}
        gold = relevant.get(a.query_id, set())
        if metric == "id_based_context_precision":
            out.append(
                (len(retrieved & gold) / len(retrieved), None) if retrieved else (None, "no context has a document id")
            )
        elif metric == "id_based_context_recall":
            out.append(
                (len(retrieved & gold) / len(gold), None) if gold else (None, "the query has no relevant document")
            )
        else:
            raise KeyError(metric)
    return out
