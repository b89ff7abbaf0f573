"""The searcher: a system prepared for a dataset, called with a queries table and a depth.

Every kind of system (irflow's own in :mod:`~irflow.tasks.retrieve.searchers`, and the systems built
elsewhere: run files, Python retrievers, services) is a :class:`Searcher`; the retrieve and latency
stages call nothing else.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import pandas as pd

from irflow.tasks.core.runs import DEFAULT_DEPTH, drop_identical_ids
from irflow.tasks.core.schema import Dataset, RetrievalInfo
from irflow.tasks.retrieve import latency
from irflow.tasks.systems import SystemSpec

FIRST_STAGE_DEPTH = 100  # a hybrid fuses, and a rerank reads, at least this deep


S = TypeVar("S", bound=SystemSpec)


class Searcher(Generic[S]):
    """A prepared system: ``searcher(queries, depth)`` -> run table. Subclasses implement ``_search``."""

    load_levels: tuple[int, ...] = ()  # concurrency levels of a load curve (services that take parallel queries)

    def __init__(self, dataset: Dataset, spec: S) -> None:
        self.dataset = dataset
        self.spec = spec
        self.info: RetrievalInfo = {"system": str(spec)}

    def __call__(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        extra = int(self.dataset.ignore_identical_ids)
        run = self._search(queries, depth + extra)
        if extra:
            run = drop_identical_ids(run)
        return run[run["rank"] <= depth].reset_index(drop=True)

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        raise NotImplementedError

    def default_depth(self) -> int:
        """The depth when none is given: ``DEFAULT_DEPTH`` hits per query (a run file: all of them)."""
        return DEFAULT_DEPTH

    def query(self, query_id: str, text: str, depth: int) -> Any:
        """One query's answer in the system's own form: what the latency stage times. By default the whole
        search path; a system with a cheaper native call (bm25s, an encoder and an index, one HTTP
        request, a fusion of its members' rankings) overrides it, so irflow's run table is not part of
        the system's latency."""
        return self(pd.DataFrame({"query_id": [query_id], "text": [text]}), depth)

    def ranking(self, query_id: str, text: str, depth: int) -> latency.Hits:
        """One query's top ``depth`` as ``(doc id, score)`` in trec_eval order, without the query's own id
        where the dataset asks: what a hybrid fuses on the latency path. By default from the run table."""
        run = self(pd.DataFrame({"query_id": [query_id], "text": [text]}), depth)
        return list(zip(run["doc_id"].tolist(), run["score"].tolist()))

    def _cut(self, query_id: str, hits: latency.Hits, depth: int) -> latency.Hits:
        if self.dataset.ignore_identical_ids:
            hits = [h for h in hits if h[0] != query_id]
        return hits[:depth]
