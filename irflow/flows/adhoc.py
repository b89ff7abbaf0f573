"""The ad-hoc ``evaluate`` flow of the Prefect UI: only what a person fills in, each with a description.

The internal :func:`irflow.flows.evaluate.evaluate_flow` also takes what suites and the command line
pass (``tracking`` with its parent run and labels, ``strict``, ``overwrite``, ``output``); the form
shows none of them. This flow has the same name (``evaluate``), so its runs sit beside the command
line's in the UI, and runs the same body in its own flow run. The dataset is a choice of the datasets
the catalog knows when the deployment is built (embedded, stored or known by name).

Annotations are evaluated (no ``from __future__ import annotations``): Prefect builds the form's
schema from them, and the dataset choice is made at run time.
"""

import functools
from typing import Annotated, Any, Literal

from pydantic import Field

from irflow.flows.evaluate import DEFAULT_DATASET, DEFAULT_METRICS, DEFAULT_SYSTEMS


def dataset_choices() -> list[str]:
    """Dataset names the catalog knows now (the form's choice); the default dataset first."""
    from irflow.tasks.ingest import list_datasets

    names = [str(row["name"]) for row in list_datasets()]
    return list(dict.fromkeys([DEFAULT_DATASET, *names]))


def build_adhoc_flow(datasets: list[str] | None = None) -> Any:
    """The ``evaluate`` flow with a UI form: ``dataset`` a choice of ``datasets`` (default: the catalog's)."""
    from prefect import flow

    from irflow.flows import evaluate
    from irflow.tasks.tracking.log import TrackingOptions

    choices = tuple(datasets or dataset_choices())
    dataset_type: Any = Literal[choices]

    def adhoc_evaluate(
        dataset: dataset_type = DEFAULT_DATASET,
        systems: list[str] = list(DEFAULT_SYSTEMS),  # noqa: B006 (Prefect passes a validated copy)
        metrics: list[str] = list(DEFAULT_METRICS),  # noqa: B006
        split: str | None = None,
        baseline: str | None = None,
        depth: Annotated[int, Field(ge=1, le=1000)] | None = None,
        latency_runs: Annotated[int, Field(ge=0)] = 3,
        seed: int = 0,
        experiment: str = "irflow",
        run_name: str | None = None,
        human: str | None = None,
    ) -> dict[str, Any]:
        """Evaluate systems on one dataset; results in results/<dataset>/<run name>/ and in MLflow.

        Args:
            dataset: dataset to evaluate on (embedded, stored, or a BEIR name downloaded on first use)
            systems: system specs, e.g. bm25, dense:minilm, hybrid:bm25+dense:minilm
            metrics: metric names, e.g. nDCG@10, R@100, RR@10
            split: split to evaluate (default: test; dev for MS MARCO)
            baseline: the system the others are compared with (default: the first)
            depth: hits per query (1 to 1000; default 100, a run file: every line)
            latency_runs: timed repetitions per query (0: skip the latency stage)
            seed: seed of the significance tests and the latency sampling
            experiment: MLflow experiment the run is logged to
            run_name: name of the run, its MLflow run and its result folder (default: dataset, systems, time)
            human: human judgements of some of the dataset's queries (a dataset's name, or a qrels file or filled
                sheet), whose own judgements are then a judge's: every mean is also calibrated by them (PPI++)
        """
        return evaluate.evaluate_flow.fn(
            dataset=dataset,
            systems=systems,
            metrics=metrics,
            split=split,
            depth=depth,
            latency_runs=latency_runs,
            baseline=baseline,
            seed=seed,
            tracking=TrackingOptions(experiment=experiment),
            run_name=run_name,
            human=human,
        ).to_dict()

    one_stage_at_a_time = evaluate.evaluate_flow.task_runner.duplicate()
    return flow(name="evaluate", flow_run_name=evaluate.flow_run_name, task_runner=one_stage_at_a_time)(adhoc_evaluate)


@functools.cache
def _adhoc_flow() -> Any:
    return build_adhoc_flow()


def __getattr__(name: str) -> Any:
    """``irflow.flows.adhoc.adhoc_evaluate``: the deployment's entrypoint, built on first use (it lists the catalog)."""
    if name == "adhoc_evaluate":
        return _adhoc_flow()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["build_adhoc_flow", "dataset_choices"]  # and adhoc_evaluate, built on first use
