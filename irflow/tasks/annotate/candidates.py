"""Candidates to annotate: per query, K documents in first-stage order, and the texts judges read.

From a dataset imported from a zbench ``QueryDocuments`` file (its ``candidates`` table, in file
order), or from the top K of any irflow system's run on any dataset (``tasks.retrieve``).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from irflow.tasks.schema import Dataset, InputError

CANDIDATE_COLUMNS = ("query_id", "doc_id", "rank")


@dataclass(frozen=True)
class Texts:
    """Query and document texts by id (documents as they are embedded: ``title + " " + text``)."""

    queries: dict[str, str]
    documents: dict[str, str]

    @classmethod
    def of(cls, dataset: Dataset) -> Texts:
        from irflow.tasks.embed import document_texts

        return cls(
            dict(zip(dataset.queries["query_id"].astype(str), dataset.queries["text"].fillna("").astype(str))),
            dict(zip(dataset.corpus["doc_id"].astype(str), document_texts(dataset.corpus))),
        )


def select_candidates(
    dataset: Dataset, system: str | None = None, k: int | None = None, queries: int | None = None
) -> pd.DataFrame:
    """Candidates (query_id, doc_id, rank): the dataset's own table when ``system`` is None, else the
    top ``k`` of the system's run; ``k`` also limits a stored table (its first K); ``queries`` keeps
    the first N query ids in sorted order (a cheap subset for trials)."""
    if k is not None and k < 1:
        raise InputError(f"k (documents per query) must be >= 1, got {k}")
    if system is None:
        if "candidates" not in dataset.manifest:
            raise InputError(
                f"dataset {dataset.name!r} has no candidates table (only zbench QueryDocuments imports "
                "have one); pick candidates with a system, e.g. --system bm25"
            )
        table = pd.read_parquet(dataset.manifest["candidates"])
    else:
        from irflow.tasks.retrieve import retrieve

        table = retrieve(dataset, system, k or 100).run
    table = table.loc[:, list(CANDIDATE_COLUMNS)].astype({"query_id": "str", "doc_id": "str", "rank": "int64"})
    table = table.drop_duplicates(["query_id", "doc_id"]).sort_values(["query_id", "rank"], kind="stable")
    if k is not None:
        table = table[table.groupby("query_id", sort=False).cumcount() < k]
    if queries is not None:
        keep = sorted(table["query_id"].unique())[:queries]
        table = table[table["query_id"].isin(keep)]
    table = table.reset_index(drop=True)
    table["rank"] = table.groupby("query_id", sort=False).cumcount().add(1).astype("int64")
    return table
