"""Run a system over a dataset's queries: BM25, dense, hybrid (reciprocal-rank fusion), rerank, and
the systems built elsewhere (run files, Python retrievers, search services: ``tasks.systems.external``).

``retrieve`` gives the run of one system; ``measure_latency`` times the same search path one
query at a time. Both go through a *searcher*: the prepared index (or a composition of
searchers) of a system, called with a queries table and a depth. Each searcher honours
``dataset.ignore_identical_ids`` itself (it fetches one hit more, drops the query's own id,
then cuts to depth), so composed systems never fuse or rerank a hit that would be dropped.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.runs import DEFAULT_DEPTH, order_run, validate_depth
from irflow.tasks.core.schema import Dataset, InputError, RetrievalInfo, info_nodes
from irflow.tasks.retrieve import dense, latency
from irflow.tasks.retrieve.base import FIRST_STAGE_DEPTH, Searcher
from irflow.tasks.retrieve.costs import api_costs
from irflow.tasks.retrieve.fusion import apply_rerank, fuse_rrf
from irflow.tasks.retrieve.http_service import HttpSearcher
from irflow.tasks.retrieve.memory import MemorySearcher
from irflow.tasks.retrieve.python_system import PluginSearcher
from irflow.tasks.retrieve.runfile import RunFileSearcher
from irflow.tasks.systems.external import HttpSpec, MemorySpec, PluginSpec, RunSpec
from irflow.tasks.systems.specs import BM25Spec, DenseSpec, HybridSpec, RerankSpec, SystemSpec, as_spec, leaves


@dataclass(frozen=True)
class RunResult:
    """One system's run on one dataset, with what it cost: ``info`` holds index build times,
    cache hits and per-stage details (nested per member for hybrid / rerank)."""

    system: str
    run: pd.DataFrame
    depth: int
    prepare_seconds: float
    search_seconds: float
    info: RetrievalInfo = field(default_factory=dict)


@dataclass(frozen=True)
class LatencyReport:
    """Per-query search latency after warm-up (ms), its spread over repeats, throughput, the index build cost.

    Timed: the system's own work per query (``Searcher.query``), with ``threads`` threads, the clock's
    cost (``clock_overhead_ms``) subtracted. ``queries`` of the split's ``queries_total`` were timed
    (``sample``), each ``num_runs`` times; ``p50_ms``/``p95_ms``/``p99_ms`` pool every sample, and
    ``p50_ms_min`` … ``p95_ms_max`` summarise the per-repeat percentiles, ``p50_ms_ci_low`` …
    ``p95_ms_ci_high`` are 95 % bootstrap intervals over queries (:func:`tasks.retrieve.latency.spread`).
    ``load_before``/``load_after``: the machine's 1-minute load average around the timing.
    A system made only of run files has no search to time: its figures are None and ``note`` says
    why. A service (``http:``) adds ``load_curve``: queries/s and latency at each concurrency level.
    """

    system: str
    queries: int
    num_runs: int
    warmup: int
    depth: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    queries_per_second: float | None
    index_build_seconds: float
    documents_per_second: float | None
    samples_ms: tuple[float, ...] = ()
    info: RetrievalInfo = field(default_factory=dict)
    load_curve: tuple[dict[str, float], ...] = ()
    note: str | None = None
    latency_api_calls: int | None = None  # API embedding models: what timing the queries one by one cost
    latency_api_tokens: int | None = None
    latency_api_cost_usd: float | None = None
    queries_total: int | None = None
    threads: int | None = None
    clock_overhead_ms: float | None = None
    p50_ms_min: float | None = None
    p50_ms_median: float | None = None
    p50_ms_max: float | None = None
    p95_ms_min: float | None = None
    p95_ms_median: float | None = None
    p95_ms_max: float | None = None
    p50_ms_ci_low: float | None = None
    p50_ms_ci_high: float | None = None
    p95_ms_ci_low: float | None = None
    p95_ms_ci_high: float | None = None
    load_before: float | None = None
    load_after: float | None = None


def retrieve(dataset: Dataset, system: str | SystemSpec, depth: int | None = None, *, source: Any = None) -> RunResult:
    """Run ``system`` for every query of ``dataset``: at most ``depth`` hits per query, trec_eval order.

    Without ``depth``, the system's own default (``Searcher.default_depth``): ``DEFAULT_DEPTH`` hits,
    and every hit of a run file, as trec_eval reads it. ``source``: the run or search callable of a
    ``memory:`` system (given in Python; :mod:`~irflow.tasks.retrieve.memory`)."""
    given = None if depth is None else validate_depth(depth)
    spec = as_spec(system)
    start = time.perf_counter()
    if source is not None:
        if not isinstance(spec, MemorySpec):
            raise TypeError(f"a run or callable is given with a memory: spec, not {spec}")
        searcher: Searcher[Any] = MemorySearcher(dataset, spec, source)
    else:
        searcher = make_searcher(dataset, spec, online=False)
    depth = searcher.default_depth() if given is None else given
    prepared = time.perf_counter()
    run = searcher(dataset.queries, depth)
    done = time.perf_counter()
    return RunResult(str(spec), run, depth, prepared - start, done - prepared, searcher.info)


def measure_latency(
    dataset: Dataset,
    system: str | SystemSpec,
    *,
    depth: int | None = None,
    warmup: int = 10,
    num_runs: int = 3,
    sample: int | None = 100,
    seed: int = 0,
    threads: int = latency.DEFAULT_THREADS,
) -> LatencyReport:
    """Time each query searched on its own, ``num_runs`` times, after ``warmup`` untimed queries.

    ``sample`` queries are drawn (seeded, so repeatable) from the dataset; None = all of them.
    What is timed is ``Searcher.query`` (the system's own work), with ``threads`` threads for every
    system (:func:`tasks.retrieve.latency.pinned_threads`). The index is prepared once beforehand; its build
    time (and, for dense, the embed stage's documents/s) is reported alongside.
    """
    depth = DEFAULT_DEPTH if depth is None else validate_depth(depth)
    if num_runs < 1 or warmup < 0 or (sample is not None and sample < 1) or threads < 1:
        raise ValueError("num_runs must be >= 1, warmup >= 0, threads >= 1 and sample >= 1 (or None)")
    spec = as_spec(system)
    queries = dataset.queries
    if all(isinstance(leaf, RunSpec) for leaf in leaves(spec)):
        note = "not measured: a run file is a ranking made elsewhere, with no search to time"
        return LatencyReport(
            str(spec), 0, num_runs, warmup, depth, None, None, None, None, None, 0.0, None, note=note,
            queries_total=len(queries),
        )  # fmt: skip
    searcher = make_searcher(dataset, spec, online=True)
    order = np.random.default_rng(seed).permutation(len(queries))
    chosen = order if sample is None else order[:sample]
    ids, texts = queries["query_id"].astype(str).to_numpy(), queries["text"].fillna("").astype(str).to_numpy()
    singles = [(str(ids[i]), str(texts[i])) for i in chosen]
    if not singles:
        raise ValueError(f"dataset {dataset.name!r} has no queries to time")
    calls = [functools.partial(searcher.query, qid, text, depth) for qid, text in singles]
    with latency.pinned_threads(threads):
        for i in range(warmup):
            calls[i % len(calls)]()
        overhead = latency.clock_overhead()
        load_before = latency.load_average()
        repeats = [latency.time_calls(calls, overhead) for _ in range(num_runs)]
        load_after = latency.load_average()
    ms = np.concatenate(repeats) * 1000.0
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    curve: tuple[dict[str, float], ...] = ()
    if searcher.load_levels:
        curve = latency.load_curve(
            lambda one: searcher.query(one[0], one[1], depth), singles * num_runs, searcher.load_levels
        )
    stages = [node for node in info_nodes(searcher.info) if "members" not in node and "first_stage" not in node]
    rates = [leaf["documents_per_second"] for leaf in stages if leaf.get("documents_per_second")]
    return LatencyReport(
        system=str(spec),
        queries=len(singles),
        num_runs=num_runs,
        warmup=warmup,
        depth=depth,
        p50_ms=float(p50),
        p95_ms=float(p95),
        p99_ms=float(p99),
        mean_ms=float(ms.mean()),
        queries_per_second=float(len(ms) / (ms.sum() / 1000.0)) if ms.sum() > 0 else None,
        index_build_seconds=float(sum(leaf.get("index_build_seconds", 0.0) for leaf in stages)),
        documents_per_second=float(min(rates)) if rates else None,
        samples_ms=tuple(float(round(x, 4)) for x in ms),
        info=searcher.info,
        load_curve=curve,
        **{f"latency_{k}": v for k, v in api_costs(searcher.info).items()},
        queries_total=len(queries),
        threads=threads,
        clock_overhead_ms=overhead * 1000.0,
        **latency.spread(repeats),
        load_before=load_before,
        load_after=load_after,
    )


def make_searcher(dataset: Dataset, spec: SystemSpec, *, online: bool = False) -> Searcher[Any]:
    """Prepare ``spec`` for ``dataset``. ``online`` = optimised for single queries (latency), not batches."""
    if isinstance(spec, BM25Spec):
        return _BM25(dataset, spec)
    if isinstance(spec, DenseSpec):
        return _DenseOnline(dataset, spec) if online else _DenseBatch(dataset, spec)
    if isinstance(spec, HybridSpec):
        return _Hybrid(dataset, spec, [make_searcher(dataset, s, online=online) for s in spec.systems])
    if isinstance(spec, RerankSpec):
        return _Rerank(dataset, spec, make_searcher(dataset, spec.first_stage, online=online))
    if isinstance(spec, RunSpec):
        return RunFileSearcher(dataset, spec)
    if isinstance(spec, PluginSpec):
        return PluginSearcher(dataset, spec)
    if isinstance(spec, HttpSpec):
        return HttpSearcher(dataset, spec)
    if isinstance(spec, MemorySpec):
        raise InputError(
            f"system {str(spec)!r} was given in Python to irflow.evaluate: there is nothing to search from its name "
            "alone (pass the run or the callable again, or write the run to a file: run:<path>)"
        )
    raise TypeError(f"not a system spec: {spec!r}")


class _BM25(Searcher[BM25Spec]):
    def __init__(self, dataset: Dataset, spec: BM25Spec) -> None:
        from irflow.tasks.index import bm25

        super().__init__(dataset, spec)
        self.index = bm25.load_index(dataset, spec)
        self.info.update(
            index_build_seconds=self.index.build_seconds,
            index_load_seconds=self.index.load_seconds,
            index_cached=self.index.cached,
            index_path=str(self.index.path) if self.index.path else None,
        )

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        return self.index.search(queries["query_id"].tolist(), queries["text"].tolist(), depth)

    def query(self, query_id: str, text: str, depth: int) -> Any:
        return self.index.query(text, depth + int(self.dataset.ignore_identical_ids))

    def ranking(self, query_id: str, text: str, depth: int) -> latency.Hits:
        rows, scores = self.query(query_id, text, depth)
        ids = self.index.doc_ids
        return self._cut(query_id, [(ids[r], float(x)) for r, x in zip(rows, scores) if x != 0], depth)


class _DenseBatch(Searcher[DenseSpec]):
    """All of the dataset's queries at once through ``retrieve.dense.dense_search`` (query vectors cached)."""

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        if queries is not self.dataset.queries:
            raise ValueError("the batch dense searcher runs the dataset's own queries; use online=True")
        run = dense.dense_search(self.dataset, self.spec, depth)
        self.info.update(run.attrs.get("dense", {}))
        return order_run(run)


class _DenseOnline(Searcher[DenseSpec]):
    """Corpus vectors and index prepared once; each call encodes its queries (latency measurement)."""

    def __init__(self, dataset: Dataset, spec: DenseSpec) -> None:
        from irflow.tasks.embed.vectors import api_spent, embed_corpus, model_for
        from irflow.tasks.index.faiss_index import build_index

        super().__init__(dataset, spec)
        self.model = model_for(spec)
        docs = embed_corpus(dataset, spec, model=self.model)
        self.spent = api_spent(self.model)  # what encoding the queries one by one costs
        self.doc_ids = np.asarray(docs.ids, dtype=object)
        self.index = build_index(docs.vectors, spec.index, spec.index_params, cache_dir=docs.path)
        self.prompt = self.model.prompt("query", spec.query_prompt)
        self.info.update(
            self.index.tracking(),
            index_build_seconds=self.index.build_seconds,
            documents_per_second=_docs_per_second(docs.path / "_COMPLETE"),
        )

    def _encode_search(self, texts: list[str], depth: int) -> tuple[np.ndarray, np.ndarray]:
        from irflow.tasks.embed.inference import encode

        spec = self.spec
        vectors = encode(
            self.model, texts, prompt=self.prompt, max_seq_length=spec.max_seq_length, batch_size=spec.batch_size
        )
        self.info.update(self.spent())
        return self.index.search(vectors, depth)

    def query(self, query_id: str, text: str, depth: int) -> Any:
        return self._encode_search([text], depth + int(self.dataset.ignore_identical_ids))

    def ranking(self, query_id: str, text: str, depth: int) -> latency.Hits:
        scores, rows = self.query(query_id, text, depth)
        hits = [(self.doc_ids[r], float(x)) for r, x in zip(rows[0], scores[0]) if r >= 0]
        return self._cut(query_id, latency.trec_order(hits), depth)

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        scores, rows = self._encode_search(queries["text"].fillna("").astype(str).tolist(), depth)
        keep = rows.ravel() >= 0
        return order_run(
            pd.DataFrame(
                {
                    "query_id": np.repeat(queries["query_id"].astype(str).to_numpy(dtype=object), rows.shape[1])[keep],
                    "doc_id": self.doc_ids[rows.ravel()[keep]],
                    "score": scores.ravel()[keep].astype(np.float64),
                }
            )
        )


def _docs_per_second(complete: Any) -> float | None:
    try:
        done = json.loads(complete.read_text(encoding="utf-8"))
        return float(done["count"]) / float(done["encode_seconds"]) if float(done["encode_seconds"]) > 0 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


class _Hybrid(Searcher[HybridSpec]):
    def __init__(self, dataset: Dataset, spec: HybridSpec, members: list[Searcher[Any]]) -> None:
        super().__init__(dataset, spec)
        self.members = members
        self.info["members"] = {str(s): m.info for s, m in zip(spec.systems, members)}

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        spec = self.spec
        first = spec.depth or max(depth, FIRST_STAGE_DEPTH)
        return fuse_rrf([member(queries, first) for member in self.members], spec.weights, spec.k)

    def query(self, query_id: str, text: str, depth: int) -> Any:
        return self.ranking(query_id, text, depth)

    def ranking(self, query_id: str, text: str, depth: int) -> latency.Hits:
        spec = self.spec
        first = spec.depth or max(depth, FIRST_STAGE_DEPTH)
        weights = spec.weights or (1.0,) * len(self.members)
        rankings = [member.ranking(query_id, text, first) for member in self.members]
        return latency.fuse_ranked(rankings, weights, spec.k)[:depth]


class _Rerank(Searcher[RerankSpec]):
    def __init__(self, dataset: Dataset, spec: RerankSpec, first_stage: Searcher[Any]) -> None:
        from irflow.tasks.embed.vectors import document_texts

        super().__init__(dataset, spec)
        self.first_stage = first_stage
        corpus = dataset.corpus
        self.doc_text = pd.Series(document_texts(corpus), index=corpus["doc_id"].astype(str).to_numpy())
        self.info.update(first_stage=first_stage.info, rerank_model=spec.model, rerank_top=spec.top)

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        from irflow.tasks.embed import inference

        spec = self.spec
        run = self.first_stage(queries, max(depth, spec.top))
        head = run[run["rank"] <= spec.top]
        query_text = pd.Series(
            queries["text"].fillna("").astype(str).to_numpy(), index=queries["query_id"].astype(str).to_numpy()
        )
        texts = head["doc_id"].map(self.doc_text).fillna("")  # a ranked document not in the corpus: no text
        items = [(str(query_text[qid]), group.tolist()) for qid, group in texts.groupby(head["query_id"], sort=False)]
        start = time.perf_counter()
        scores = inference.score_pairs_many(spec.model, items, encoder=spec) if items else []
        self.info["rerank_seconds"] = self.info.get("rerank_seconds", 0.0) + time.perf_counter() - start
        return apply_rerank(run, spec.top, [s for row in scores for s in row])
