"""irflow: evaluate retrieval systems, from a notebook or as a workflow.

The library first::

    import irflow
    ev = irflow.evaluate("techdocs", ["bm25", "dense:minilm"])   # an irflow.Evaluation
    ev.means; ev.comparisons; ev.verdict; ev.save("results/x"); ev.to_latex()

``irflow.api`` holds the public API (re-exported here, imported on first use so ``import irflow`` stays
fast), ``irflow.tasks`` one package per stage (pure functions), ``irflow.flows`` the Prefect flows and
``irflow.cli`` the command line (both thin layers over the API), ``irflow.datasets`` the BEIR catalog and
the demo dataset, ``irflow.deployments`` the Prefect deployments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from irflow.tasks.core.config import irflow_version

if TYPE_CHECKING:
    from irflow.api import (  # noqa: F401 (the names __getattr__ gives)
        ABTest,
        Coverage,
        Dataset,
        Evaluation,
        InputError,
        Interleaving,
        Power,
        RagEvaluation,
        SystemsFailed,
        Tracking,
        abtest,
        evaluate,
        evaluate_rag,
        interleave,
        load_dataset,
        power,
    )

__version__ = irflow_version()

_API = {
    "ABTest": "irflow.api.abtest",
    "Coverage": "irflow.api.evaluation",
    "Dataset": "irflow.tasks.core.schema",
    "Evaluation": "irflow.api.evaluation",
    "InputError": "irflow.tasks.core.schema",
    "Interleaving": "irflow.api.interleave",
    "Power": "irflow.api.power",
    "RagEvaluation": "irflow.api.rag",
    "SystemsFailed": "irflow.api.pipeline",
    "Tracking": "irflow.api.evaluation",
    "abtest": "irflow.api.abtest",
    "evaluate": "irflow.api.evaluate",
    "evaluate_rag": "irflow.api.rag",
    "interleave": "irflow.api.interleave",
    "load_dataset": "irflow.api.evaluate",
    "power": "irflow.api.power",
}

__all__ = ["__version__", *sorted(_API)]


def __getattr__(name: str) -> Any:
    """The public API, imported on first use (pandas and the stages load then, not at ``import irflow``)."""
    import importlib

    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'irflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
