"""irflow's public API: the library the command line and the Prefect flows are built on.

Public API::

    import irflow

    ev = irflow.evaluate("techdocs", ["bm25", "dense:minilm"], metrics=["nDCG@10", "RR@10"])
    ev.means, ev.comparisons, ev.per_query, ev.verdict
    ev.save("results/x"); irflow.Evaluation.load("results/x"); ev.to_latex()

Modules: ``request`` (the arguments, checked once: :func:`make_request`), ``pipeline`` (the stages composed
once, run in-process or as Prefect tasks), ``evaluation`` (:class:`Evaluation`: the typed result, its result
folder), ``evaluate`` (:func:`evaluate`, :func:`load_dataset`), ``rag`` (:func:`evaluate_rag`), ``abtest``,
``interleave`` and ``power`` (the online experiments and the power of an evaluation set).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_MODULES = {
    "ABTest": "abtest",
    "SampleRatio": "abtest",
    "abtest": "abtest",
    "Coverage": "evaluation",
    "Evaluation": "evaluation",
    "Tracking": "evaluation",
    "evaluate": "evaluate",
    "load_dataset": "evaluate",
    "track_evaluation": "evaluate",
    "Interleaving": "interleave",
    "interleave": "interleave",
    "Power": "power",
    "power": "power",
    "Stages": "pipeline",
    "SystemsFailed": "pipeline",
    "run_evaluation": "pipeline",
    "RagEvaluation": "rag",
    "evaluate_rag": "rag",
    "EvaluationRequest": "request",
    "SystemEntry": "request",
    "make_request": "request",
}


def __getattr__(name: str) -> Any:
    """Each name imported from its module on first use: importing one module of the API (the command line's
    checks import ``irflow.api.names``) does not import the others."""
    if name in ("Dataset", "InputError"):
        from irflow.tasks.core import schema

        return getattr(schema, name)
    if name in _MODULES:
        value = getattr(importlib.import_module(f"irflow.api.{_MODULES[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'irflow.api' has no attribute {name!r}")
