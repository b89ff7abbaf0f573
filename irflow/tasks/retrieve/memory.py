"""Systems given in Python (``irflow.evaluate(systems={"mine": run_or_callable})``): a ranking already made
(``{query_id: {doc_id: score}}`` as ranx and pytrec_eval take it, or a DataFrame ``query_id, doc_id, score``)
or a callable ``(queries, k) -> hits`` that searches, with the hits of the ``python:`` protocol
(:mod:`~irflow.tasks.retrieve.python_system`). Either is a :class:`MemorySearcher` of a ``memory:<label>``
spec, so the stages after retrieval treat it as any other system.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.runs import DEFAULT_DEPTH, has_duplicates, order_run
from irflow.tasks.core.schema import Dataset, InputError, IrflowError
from irflow.tasks.retrieve.base import Searcher
from irflow.tasks.retrieve.ranking import add_counts, against_dataset, ranked_lists
from irflow.tasks.systems.external import MemorySpec

Search = Callable[[list[dict[str, str]], int], Any]
"""A retriever as a function: ``search([{"query_id": ..., "text": ...}, ...], k)`` -> one ranked list per query
(or a mapping query id -> list), each hit ``(doc_id, score)``, ``{"doc_id", "score"}`` or a bare doc id."""

QUERY_COLUMNS = ("query_id", "q_id")  # ranx's DataFrames name the query column q_id


def _column(table: pd.DataFrame, names: tuple[str, ...], where: str, what: str) -> str:
    found = next((n for n in names if n in table.columns), None)
    if found is None:
        raise InputError(
            f"{where}: no {what} column; expected one of {', '.join(names)}, got {', '.join(map(str, table.columns))}"
        )
    return found


def as_run(value: Mapping[str, Mapping[str, float]] | pd.DataFrame, where: str) -> pd.DataFrame:
    """A run table (``query_id, doc_id, score``, trec_eval's order, ``rank``) from ``{query_id: {doc_id: score}}``
    or a DataFrame with ``query_id`` (or ``q_id``), ``doc_id`` and ``score``; errors name ``where``."""
    if isinstance(value, pd.DataFrame):
        query = _column(value, QUERY_COLUMNS, where, "query id")
        _column(value, ("doc_id",), where, "document id")
        _column(value, ("score",), where, "score")
        scores = pd.to_numeric(value["score"], errors="coerce")
        table = pd.DataFrame(
            {"query_id": value[query].astype(str), "doc_id": value["doc_id"].astype(str), "score": scores}
        )
    elif isinstance(value, Mapping):
        rows: list[tuple[str, str, Any]] = []
        for qid, hits in value.items():
            if not isinstance(hits, Mapping):
                raise InputError(f"{where}: query {qid!r} maps to a {type(hits).__name__}; expected {{doc_id: score}}")
            rows.extend((str(qid), str(doc), score) for doc, score in hits.items())
        table = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"]).astype({"query_id": "str", "doc_id": "str"})
        table["score"] = pd.to_numeric(table["score"], errors="coerce")
    else:
        raise InputError(
            f"{where}: got a {type(value).__name__}; expected a run {{query_id: {{doc_id: score}}}}, a DataFrame "
            "query_id, doc_id, score, a callable (queries, k) -> hits, or a system spec string"
        )
    bad = ~np.isfinite(table["score"].to_numpy(dtype=np.float64))
    if bad.any():
        row = table[bad].iloc[0]
        raise InputError(
            f"{where}: score of document {row['doc_id']!r} for query {row['query_id']!r} is not a finite number"
        )
    if has_duplicates(table):
        row = table[table.duplicated(["query_id", "doc_id"])].iloc[0]
        raise InputError(f"{where}: document {row['doc_id']!r} appears twice for query {row['query_id']!r}")
    return order_run(table)


def as_qrels(value: Mapping[str, Mapping[str, int]] | pd.DataFrame, where: str = "qrels") -> pd.DataFrame:
    """Judgements (``query_id, doc_id, relevance`` int64) from ``{query_id: {doc_id: grade}}`` or a DataFrame with
    ``query_id`` (or ``q_id``), ``doc_id`` and ``relevance`` (or ``grade``, or ranx's ``score``)."""
    if isinstance(value, pd.DataFrame):
        query = _column(value, QUERY_COLUMNS, where, "query id")
        _column(value, ("doc_id",), where, "document id")
        grade = _column(value, ("relevance", "grade", "score"), where, "grade")
        table = pd.DataFrame({"query_id": value[query], "doc_id": value["doc_id"], "relevance": value[grade]})
    elif isinstance(value, Mapping):
        rows: list[tuple[Any, Any, Any]] = []
        for qid, docs in value.items():
            if not isinstance(docs, Mapping):
                raise InputError(f"{where}: query {qid!r} maps to a {type(docs).__name__}; expected {{doc_id: grade}}")
            rows.extend((qid, doc, g) for doc, g in docs.items())
        table = pd.DataFrame(rows, columns=["query_id", "doc_id", "relevance"])
    else:
        raise InputError(
            f"{where}: got a {type(value).__name__}; expected {{query_id: {{doc_id: grade}}}} or a DataFrame"
        )
    grades = pd.to_numeric(table["relevance"], errors="coerce")
    integral = grades.notna() & np.isfinite(grades) & (grades == grades.round())
    if not integral.all():
        row = table[~integral].iloc[0]
        raise InputError(
            f"{where}: grade {row['relevance']!r} of document {row['doc_id']!r} for query {row['query_id']!r}; "
            "expected an integer grade (0 = judged not relevant)"
        )
    table = table.assign(relevance=grades.astype("int64")).astype({"query_id": "str", "doc_id": "str"})
    if table.duplicated(["query_id", "doc_id"]).any():
        row = table[table.duplicated(["query_id", "doc_id"])].iloc[0]
        raise InputError(f"{where}: document {row['doc_id']!r} is judged twice for query {row['query_id']!r}")
    if table.empty:
        raise InputError(f"{where}: no judgements; expected at least one (query_id, doc_id, grade)")
    return table.reset_index(drop=True)


class MemorySearcher(Searcher[MemorySpec]):
    """A system given in Python: its run, cut to the depth (by default all of it, as a run file), or its callable
    asked for every query at once. A dataset without a corpus (judgements alone) checks query ids only."""

    def __init__(self, dataset: Dataset, spec: MemorySpec, source: pd.DataFrame | Search) -> None:
        super().__init__(dataset, spec)
        self.search = source if callable(source) and not isinstance(source, pd.DataFrame) else None
        self.run = None if self.search is not None else order_run(self._known(source))
        self.info.update(memory="callable" if self.search is not None else "run")

    def _known(self, run: pd.DataFrame) -> pd.DataFrame:
        where = f"system {self.spec.label!r}"
        if len(self.dataset.corpus):
            kept, counts = against_dataset(self.dataset, run, where)
        else:
            known = run["query_id"].isin(self.dataset.queries["query_id"].astype(str))
            kept, counts = run[known], {"unknown_queries": int(run["query_id"][~known].nunique())}
        add_counts(self.info, counts)
        return kept

    def default_depth(self) -> int:
        if self.run is None:
            return DEFAULT_DEPTH
        return int(self.run["rank"].max()) if len(self.run) else DEFAULT_DEPTH

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        if self.run is not None:
            run = self.run[self.run["rank"] <= depth]
            if queries is not self.dataset.queries:
                run = run[run["query_id"].isin(queries["query_id"].astype(str))]
            return run.reset_index(drop=True)
        assert self.search is not None
        qids = queries["query_id"].astype(str).tolist()
        items = [{"query_id": q, "text": t} for q, t in zip(qids, queries["text"].fillna("").astype(str))]
        try:
            answers = self.search(items, depth)
        except IrflowError:
            raise
        except (Exception, SystemExit) as exc:  # the system fails, named; the others keep their results
            raise InputError(f"system {self.spec.label!r}: search failed: {type(exc).__name__}: {exc}") from exc
        return order_run(self._known(ranked_lists(answers, qids, self.spec.label, depth)))
