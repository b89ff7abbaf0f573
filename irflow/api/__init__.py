"""irflow's public API: the library the command line and the Prefect flows are built on.

Public API::

    import irflow

    ev = irflow.evaluate("techdocs", ["bm25", "dense:minilm"], metrics=["nDCG@10", "RR@10"])
    ev.means, ev.comparisons, ev.per_query, ev.verdict
    ev.save("results/x"); irflow.Evaluation.load("results/x"); ev.to_latex()

Modules: ``request`` (the arguments, checked once: :func:`make_request`), ``pipeline`` (the stages composed
once, run in-process or as Prefect tasks), ``evaluation`` (:class:`Evaluation`: the typed result, its result
folder), ``evaluate`` (:func:`evaluate`, :func:`load_dataset`), ``rag`` (:func:`evaluate_rag`; its arguments,
stages and result in ``rag_request``, ``rag_pipeline`` and ``rag_evaluation``), ``abtest``,
``interleave`` and ``power`` (the online experiments and the power of an evaluation set).
"""

from __future__ import annotations

from irflow.api.abtest import ABTest, SampleRatio, abtest
from irflow.api.evaluate import evaluate, load_dataset, track_evaluation
from irflow.api.evaluation import Coverage, Evaluation, Tracking
from irflow.api.interleave import Interleaving, interleave
from irflow.api.pipeline import Stages, SystemsFailed, run_evaluation
from irflow.api.power import Power, power
from irflow.api.rag import RagEvaluation, evaluate_rag
from irflow.api.request import EvaluationRequest, SystemEntry, make_request
from irflow.tasks.core.schema import Dataset, InputError

__all__ = [
    "ABTest",
    "Coverage",
    "Dataset",
    "Evaluation",
    "EvaluationRequest",
    "InputError",
    "Interleaving",
    "Power",
    "RagEvaluation",
    "SampleRatio",
    "Stages",
    "SystemEntry",
    "SystemsFailed",
    "Tracking",
    "abtest",
    "evaluate",
    "evaluate_rag",
    "interleave",
    "load_dataset",
    "make_request",
    "power",
    "run_evaluation",
    "track_evaluation",
]
