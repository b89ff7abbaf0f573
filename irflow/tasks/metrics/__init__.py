"""irflow metrics stage: trec_eval-identical retrieval measures, vectorised over queries.

Public API::

    from irflow.tasks.metrics import Measure, parse_measure, parse_measures, expand, evaluate, mean

    measures = expand(["nDCG", "P", "R", "RR", "AP", "Success"], [1, 5, 10, 100]) + parse_measures(["Rprec"])
    per_query = evaluate(run, qrels, measures)      # query_id, measure, value
    summary = mean(per_query)                      # {"nDCG@10": 0.67, ...}
    keys = {m.key: summary[m.name] for m in measures}   # MLflow-safe: ndcg_at_10

Conventions (all trec_eval's, checked against pytrec_eval in tests/metrics/test_metrics.py): ranking by
score descending, ties by doc id descending; relevant = grade >= relevance_level; nDCG's gain is
the grade (``dcg='exp-log2'``: 2^grade − 1) with discount log2(rank + 1) and the ideal ranking from
all judgements; P@k divides by k; AP@k divides by the number of relevant judgements; judged queries
missing from the run score 0; queries with no relevant judgement score 0 and stay in the mean;
duplicate (query_id, doc_id) rows are an error.

Layout follows ranx and ir_measures: one module per family (``ndcg``, ``precision``, ``recall``,
``reciprocal_rank``, ``average_precision``, ``success``, ``rprec``, ``bpref``, ``judged``), each holding a vectorised
``compute(ranking, measures, relevance_level)`` over the shared grade matrix of ``_core`` and the
family's one declaration (:class:`Family`), registered on import (below). ``measures`` holds the
registry and the :class:`Measure` spec; ``evaluate`` runs the registered families and never imports
a family module.
"""

from __future__ import annotations

from . import (  # noqa: F401 (each registers its family)
    average_precision,
    bpref,
    judged,
    ndcg,
    precision,
    recall,
    reciprocal_rank,
    rprec,
    success,
)
from .evaluate import COLUMNS, evaluate, mean
from .measures import FAMILIES, Family, Measure, expand, parse_measure, parse_measures

__all__ = [
    "COLUMNS",
    "FAMILIES",
    "Family",
    "Measure",
    "evaluate",
    "expand",
    "mean",
    "parse_measure",
    "parse_measures",
]
