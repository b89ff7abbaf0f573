"""An evaluation's arguments as the command line names them: :func:`request_of` checks them with
:func:`irflow.api.make_request` and names each option as ``irflow run`` spells it (``--system``, not
``systems``). No Prefect here: ``irflow run`` checks its arguments with this before Prefect is imported."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from irflow.api.request import EvaluationRequest, make_request
from irflow.tasks.core.schema import InputError


def request_of(
    dataset: str,
    systems: Sequence[str],
    metrics: Sequence[str],
    *,
    split: str | None = None,
    depth: int | None = None,
    latency_runs: int = 3,
    baseline: str | None = None,
    seed: int = 0,
    human: str | Path | None = None,
    labels: Mapping[str, str] | None = None,
) -> EvaluationRequest:
    """The evaluation request of ``irflow run`` and the flow's parameters, checked (errors name the
    command-line option: ``--system``, ``--metric``, ...)."""
    try:
        return make_request(
            dataset,
            list(systems),
            metrics=list(metrics),
            baseline=baseline,
            depth=depth,
            split=split,
            human=human,
            seed=seed,
            latency_runs=latency_runs,
            labels=labels,
        )
    except InputError as exc:
        raise InputError(cli_names(str(exc))) from None


def cli_names(message: str) -> str:
    """An API argument's name in an error, as the command line spells it (``systems:`` -> ``--system:``)."""
    for name, option in OPTION_NAMES.items():
        if message.startswith(name + ":") or message.startswith(name + "["):
            return option + message[len(name) :]
    return message


OPTION_NAMES = {
    "systems": "--system",
    "metrics": "--metric",
    "dataset": "--dataset",
    "baseline": "--baseline",
    "depth": "--depth",
    "split": "--split",
    "human": "--human",
    "latency_runs": "--latency-runs",
    "seed": "--seed",
}


__all__ = ["OPTION_NAMES", "cli_names", "request_of"]
