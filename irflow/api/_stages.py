"""The retrieval stages the API's compositions share, run in this process (the flows pass Prefect tasks)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from irflow.tasks.core.schema import Dataset


def ingest(name: str, split: str | None) -> Dataset:
    """The dataset ``name`` (its ``split``)."""
    from irflow.tasks.ingest import load_dataset

    return load_dataset(name, split)


def embed(data: Dataset, specs: Sequence[str]) -> Any:
    """Encode every corpus the systems need, in this process."""
    from irflow.tasks.embed import sharding

    return [sharding.encode_job(data, job) for job in sharding.embed_jobs(data, specs)]


def retrieve(data: Dataset, system: str, depth: int | None) -> Any:
    """One system's run on the dataset (``.run``: query_id, doc_id, rank, score)."""
    from irflow.tasks.retrieve.searchers import retrieve as retrieve_run

    return retrieve_run(data, system, depth)
