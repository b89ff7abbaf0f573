"""BM25 over a canonical dataset: bm25s (default, cached on disk) or rank-bm25 (reference baseline).

Both backends see the same tokens: ``title + " " + text``, lower-cased, split on ``\\w\\w+``,
English stopwords removed, Snowball English stems (PyStemmer) - the bm25s recipe behind the
reference figures in STACK.md. The bm25s index is stored under
``cache_dir()/bm25/index/<key>``, where the key hashes everything that changes the index (dataset
fingerprint, backend, method, tokenizer, k1, b, this module's version); the tokenized corpus under
``cache_dir()/bm25/tokens/<key>`` (fingerprint and tokenizer only), so a k1/b sweep tokenizes once.
Both are written into a temporary folder that is renamed into place, so a half-written one is never
loaded. The index build itself is whole-array numpy (:func:`build_scores`), bit-identical to bm25s's.

The tokens and their cache live in ``bm25_tokens``, the score matrix in ``bm25_scores``; both re-exported here.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.atomic import publish_dir, write_json
from irflow.tasks.core.config import cache_dir
from irflow.tasks.core.runs import empty_run, order_run
from irflow.tasks.core.schema import Dataset, InputError
from irflow.tasks.index.bm25_scores import build_scores
from irflow.tasks.index.bm25_tokens import (
    BM25_CODE_VERSION,
    TOKEN_PATTERN,
    CorpusTokens,
    corpus_tokens,
    document_texts,
    tokenize,
    tokenizer_identity,
    tokens_key,
)
from irflow.tasks.systems.specs import BM25Spec, as_spec

log = logging.getLogger(__name__)

_RANK_BM25_CLASSES = {"okapi": "BM25Okapi", "bm25l": "BM25L", "bm25+": "BM25Plus"}


def _engine(spec: BM25Spec) -> Any:
    """A bm25s engine whose index build is :func:`build_scores` (bm25s documents the method as the override point)."""
    import bm25s

    class VectorisedBM25(bm25s.BM25):
        def build_index_from_ids(
            self,
            unique_token_ids: list[int],
            corpus_token_ids: Any,
            show_progress: bool = True,
            leave_progress: bool = False,
        ) -> dict[str, Any]:
            if not isinstance(corpus_token_ids, CorpusTokens):
                corpus_token_ids = CorpusTokens.from_lists(corpus_token_ids, {})
            matrix, self.nonoccurrence_array = build_scores(
                corpus_token_ids,
                len(unique_token_ids),
                method=self.method,
                idf_method=self.idf_method,
                k1=self.k1,
                b=self.b,
                delta=self.delta,
                dtype=self.dtype,
                int_dtype=self.int_dtype,
            )
            return matrix

    return VectorisedBM25(k1=spec.k1, b=spec.b, method=spec.method)


def cache_key(dataset: Dataset, spec: BM25Spec) -> str:
    """sha256 over everything that changes the index; the name of its cache folder."""
    identity = {
        "fingerprint": dataset.fingerprint,
        "backend": spec.backend,
        "method": spec.method,
        "k1": spec.k1,
        "b": spec.b,
        "code": BM25_CODE_VERSION,
        "bm25s": metadata.version("bm25s"),
        "tokenizer": tokenizer_identity(spec),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


@dataclass
class BM25Index:
    """A ready BM25 index. ``cached`` says it was loaded from disk; ``build_seconds`` is the original build."""

    spec: BM25Spec
    doc_ids: np.ndarray
    engine: Any
    build_seconds: float
    load_seconds: float
    cached: bool
    path: Path | None = None

    def search(self, query_ids: Sequence[str], texts: Sequence[str], depth: int) -> pd.DataFrame:
        """Top-``depth`` run for a batch of queries, in trec_eval order; docs sharing no term are left out."""
        qids = np.asarray(query_ids, dtype=object).astype(str)
        k = min(int(depth), len(self.doc_ids))
        if len(qids) == 0 or k < 1:
            return empty_run()
        tokens = tokenize(texts, self.spec)
        if self.spec.backend == "bm25s":
            ids = self._term_ids(tokens)
            # A query with no indexed term matches nothing (bm25s's own fallback for it crashes).
            matched = [i for i, q in enumerate(ids) if q]
            if not matched:
                return empty_run()
            qids = qids[matched]
            docs, scores = self._bm25s_topk([ids[i] for i in matched], k)
        else:
            docs, scores = self._rank_bm25_topk(tokens, k)
        scores = np.asarray(scores, dtype=np.float64).ravel()
        keep = scores != 0.0
        run = pd.DataFrame(
            {
                "query_id": np.repeat(qids, k)[keep],
                "doc_id": self.doc_ids[np.asarray(docs).ravel()[keep]],
                "score": scores[keep],
            }
        )
        return order_run(run)

    def query(self, text: str, depth: int) -> tuple[np.ndarray, np.ndarray]:
        """One query's top ``depth`` as ``(document rows, scores)`` in trec_eval order, no run table: the
        tokenisation and the scoring, what the latency stage times (zero scores are kept).

        One bm25s scoring pass over the corpus and an exact top-k (ties at the cut included), the
        work ``bm25s.retrieve`` does for one query, without its batch machinery.
        """
        k = min(int(depth), len(self.doc_ids))
        if self.spec.backend != "bm25s":
            docs, scores = self._rank_bm25_topk(tokenize([text], self.spec), k)
            return docs[0], scores[0]
        tokenized = tokenize([text], self.spec, return_ids=True)
        words = {i: word for word, i in tokenized.vocab.items()}
        vocab = self.engine.vocab_dict
        ids = [vocab[words[i]] for i in tokenized.ids[0] if words[i] in vocab]
        if not ids or k < 1:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
        full = self.engine.get_scores(ids)
        rows = self._exact_top(full, k)
        return rows, full[rows]

    def _term_ids(self, tokens: list[list[str]]) -> list[list[int]]:
        vocab = self.engine.vocab_dict
        return [[vocab[t] for t in q if t in vocab] for q in tokens]

    def _bm25s_topk(self, ids: list[list[int]], k: int) -> tuple[np.ndarray, np.ndarray]:
        """bm25s's top k+1 per query; where a tie crosses the cut, that query is re-selected exactly.

        One thread: bm25s's thread pool gave no gain here (its numpy scoring holds the GIL).
        """
        fetch = min(k + 1, len(self.doc_ids))
        docs, scores = self.engine.retrieve(ids, k=fetch, sorted=True, show_progress=False, return_as="tuple")
        docs, scores = np.array(docs[:, :k]), np.array(scores)
        if fetch > k:
            for i in np.flatnonzero((scores[:, k - 1] == scores[:, k]) & (scores[:, k] != 0)):
                full = self.engine.get_scores(ids[i])
                docs[i] = self._exact_top(full, k)
                scores[i, :k] = full[docs[i]]
        return docs, scores[:, :k]

    def _rank_bm25_topk(self, tokens: list[list[str]], k: int) -> tuple[np.ndarray, np.ndarray]:
        docs = np.empty((len(tokens), k), dtype=np.int64)
        scores = np.empty((len(tokens), k), dtype=np.float64)
        for i, query in enumerate(tokens):  # rank-bm25 scores one query at a time
            s = np.asarray(self.engine.get_scores(query), dtype=np.float64)
            docs[i] = self._exact_top(s, k)
            scores[i] = s[docs[i]]
        return docs, scores

    def _exact_top(self, scores: np.ndarray, k: int) -> np.ndarray:
        """Rows of the ``k`` best documents in trec_eval order (score desc, doc id desc), ties at the cut included."""
        if k < len(scores):
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            candidates = np.flatnonzero(scores >= kth)
        else:
            candidates = np.arange(len(scores))
        order = np.lexsort((self._doc_id_desc_rank[candidates], -scores[candidates]))
        return candidates[order[:k]]

    @functools.cached_property
    def _doc_id_desc_rank(self) -> np.ndarray:
        """Position of each document when doc ids are sorted descending (as strings, like trec_eval)."""
        rank = np.empty(len(self.doc_ids), dtype=np.int64)
        rank[np.argsort(self.doc_ids.astype(str), kind="stable")[::-1]] = np.arange(len(self.doc_ids))
        return rank


def load_index(dataset: Dataset, spec: BM25Spec | str = BM25Spec()) -> BM25Index:
    """The BM25 index of ``dataset``: loaded from the cache if present, else built (and cached for bm25s)."""
    parsed = as_spec(spec)
    if not isinstance(parsed, BM25Spec):
        raise InputError(f"not a BM25 system: {parsed}")
    spec = parsed
    if len(dataset.corpus) == 0:
        raise InputError(f"dataset {dataset.name!r} has an empty corpus: nothing to index")
    doc_ids = dataset.corpus["doc_id"].astype("str").to_numpy(dtype=object)
    if spec.backend == "rank_bm25":
        start = time.perf_counter()
        import rank_bm25

        assert spec.method is not None  # BM25Spec resolves the backend's default method
        engine_cls = getattr(rank_bm25, _RANK_BM25_CLASSES[spec.method])
        engine = engine_cls(tokenize(document_texts(dataset), spec), k1=spec.k1, b=spec.b)
        seconds = time.perf_counter() - start
        return BM25Index(spec, doc_ids, engine, seconds, 0.0, cached=False)

    path = cache_dir() / "bm25" / "index" / cache_key(dataset, spec)
    if (path / "meta.json").exists():
        try:
            return _load(path, spec, doc_ids)
        except Exception as exc:  # a cache entry from an incompatible bm25s, or damaged on disk: rebuild it
            log.warning("BM25 cache %s unreadable (%s); rebuilding", path, exc)
            shutil.rmtree(path, ignore_errors=True)
    return _build(dataset, spec, doc_ids, path)


def _build(dataset: Dataset, spec: BM25Spec, doc_ids: np.ndarray, path: Path) -> BM25Index:
    start = time.perf_counter()
    engine = _engine(spec)
    engine.index(corpus_tokens(dataset, spec), show_progress=False)
    seconds = time.perf_counter() - start
    with publish_dir(path) as tmp:
        engine.save(str(tmp), show_progress=False)
        pd.DataFrame({"doc_id": doc_ids.astype(str)}).to_parquet(tmp / "doc_ids.parquet", index=False)
        write_json(
            tmp / "meta.json",
            {
                "system": str(spec),
                "dataset": dataset.name,
                "fingerprint": dataset.fingerprint,
                "documents": len(doc_ids),
                "build_seconds": seconds,
                "bm25s": metadata.version("bm25s"),
                "code": BM25_CODE_VERSION,
            },
        )
    log.info("built BM25 index %s for %s in %.2fs", spec, dataset.name, seconds)
    return BM25Index(spec, doc_ids, engine, seconds, 0.0, cached=False, path=path)


def _load(path: Path, spec: BM25Spec, doc_ids: np.ndarray) -> BM25Index:
    import bm25s

    start = time.perf_counter()
    meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    stored = pd.read_parquet(path / "doc_ids.parquet")["doc_id"].to_numpy(dtype=object)
    if len(stored) != len(doc_ids) or not np.array_equal(stored, doc_ids.astype(str)):
        raise ValueError("document ids differ from the dataset's")
    engine = bm25s.BM25.load(str(path), show_progress=False)
    return BM25Index(
        spec, stored, engine, float(meta["build_seconds"]), time.perf_counter() - start, cached=True, path=path
    )


def search(dataset: Dataset, spec: BM25Spec | str = BM25Spec(), depth: int = 100) -> pd.DataFrame:
    """Run BM25 for all of the dataset's queries: a run table (query_id, doc_id, score, rank)."""
    index = load_index(dataset, spec)
    return index.search(dataset.queries["query_id"].tolist(), dataset.queries["text"].tolist(), depth)


__all__ = [
    "BM25_CODE_VERSION",
    "TOKEN_PATTERN",
    "BM25Index",
    "CorpusTokens",
    "build_scores",
    "cache_key",
    "corpus_tokens",
    "document_texts",
    "load_index",
    "search",
    "tokenize",
    "tokenizer_identity",
    "tokens_key",
]
