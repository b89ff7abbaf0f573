"""Candidates to annotate: per query, K documents in first-stage order, and the texts judges read.

From a dataset imported from a zbench ``QueryDocuments`` file (its ``candidates`` table, in file
order), or from the top K of any irflow system's run on any dataset (``tasks.retrieve``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from irflow.tasks.core.schema import Dataset, InputError

CANDIDATE_COLUMNS = ("query_id", "doc_id", "rank")


@dataclass(frozen=True)
class Texts:
    """Query and document texts by id (documents as they are embedded: ``title + " " + text``)."""

    queries: dict[str, str]
    documents: dict[str, str]

    @classmethod
    def of(cls, dataset: Dataset) -> Texts:
        from irflow.tasks.embed.vectors import document_texts

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
        from irflow.tasks.retrieve.searchers import retrieve

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


def draw_anchors(dataset: Dataset, candidates: pd.DataFrame, per_query: int, seed: int = 0) -> pd.DataFrame:
    """Cross-query anchors: per query, ``per_query`` documents drawn (seeded, per query) from the corpus
    outside its candidates and its judged-relevant documents — other queries' documents, nearly always
    irrelevant to it. They battle the candidates like any other document, so the Bradley–Terry scale of
    each query gains a fixed point: what an irrelevant document scores. Columns ``query_id, doc_id,
    rank`` (ranks after the query's candidates)."""
    if per_query < 0:
        raise InputError(f"anchors must be >= 0, got {per_query}")
    columns = list(CANDIDATE_COLUMNS)
    if per_query == 0 or candidates.empty:
        return pd.DataFrame(columns=columns).astype({"query_id": "str", "doc_id": "str", "rank": "int64"})
    corpus = np.array(sorted(dataset.corpus["doc_id"].astype(str)))
    relevant = dataset.qrels[dataset.qrels["relevance"] > 0].astype({"query_id": "str", "doc_id": "str"})
    judged = relevant.groupby("query_id")["doc_id"].agg(set).to_dict()
    rows = []
    for qid, group in candidates.groupby("query_id", sort=True):
        taken = set(group["doc_id"].astype(str)) | judged.get(str(qid), set())
        free = len(corpus) - len(taken & set(corpus))
        if free < per_query:
            raise InputError(
                f"query {qid!r}: only {free} documents outside its candidates for {per_query} anchors; "
                "use fewer anchors (or a larger corpus)"
            )
        digest = hashlib.sha256(f"anchors\0{int(seed)}\0{qid}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        chosen: list[str] = []
        while len(chosen) < per_query:
            doc = str(corpus[int(rng.integers(len(corpus)))])
            if doc not in taken:
                taken.add(doc)
                chosen.append(doc)
        last = int(group["rank"].max())
        rows += [(str(qid), doc, last + i) for i, doc in enumerate(chosen, 1)]
    return pd.DataFrame(rows, columns=columns).astype({"query_id": "str", "doc_id": "str", "rank": "int64"})
