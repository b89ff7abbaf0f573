"""irflow retrieve stage: run a system over a dataset's queries, and time it.

Public API::

    from irflow.tasks.retrieve import retrieve, measure_latency

    result = retrieve(dataset, "hybrid:bm25+dense:minilm", depth=100)   # RunResult: run table, info, seconds
    result.run            # query_id, doc_id, score, rank (trec_eval order)

Every system is a :class:`~irflow.tasks.retrieve.base.Searcher` (``base``): irflow's own in
``searchers`` (BM25, dense batch and online, hybrid, rerank), dense search in ``dense``, fusion and
reranking of run tables in ``fusion``; the systems built elsewhere in ``runfile`` (``run:``; its bytes read within
limits in ``runfile_bytes``, JSON and Parquet runs parsed in ``runfile_formats``),
``python_system`` (``python:`` and entry-point kinds) and ``http_service`` (``http:``), their rankings
checked against the dataset in ``ranking``. ``latency`` times one query at a time; ``costs`` says
what a retrieval cost, and only what this run measured.
"""

from __future__ import annotations

from irflow.tasks.retrieve.base import FIRST_STAGE_DEPTH, Searcher
from irflow.tasks.retrieve.costs import fresh_costs, retrieval_costs
from irflow.tasks.retrieve.fusion import apply_rerank, fuse_rrf
from irflow.tasks.retrieve.runfile import read_run
from irflow.tasks.retrieve.searchers import LatencyReport, RunResult, make_searcher, measure_latency, retrieve

__all__ = [
    "FIRST_STAGE_DEPTH",
    "LatencyReport",
    "RunResult",
    "Searcher",
    "apply_rerank",
    "fresh_costs",
    "fuse_rrf",
    "make_searcher",
    "measure_latency",
    "read_run",
    "retrieval_costs",
    "retrieve",
]
