"""``http:<url>``: a live search service in the loop. Each query is one request; the answer's hits are
the ranking (see :mod:`irflow.tasks.systems.http_options` for the request and answer shapes).

A batch (the retrieval of every query) runs ``concurrency`` requests at a time; the latency stage
sends one query at a time (p50/p95/p99 end to end) and then the load curve (queries/s and p95 at
each level of ``load``). 429 and 5xx answers are retried (``retries``), waiting what ``Retry-After``
says (:mod:`irflow.tasks.core.http_client`). The token named by ``auth_env`` is read from the environment
when the system is prepared, sent in a header, and never stored, tracked or shown: error bodies that
echo it are redacted.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.core.http_client import Call, KeepAliveClient, RetryPolicy, keep_alive_usable
from irflow.tasks.core.progress import Progress
from irflow.tasks.core.redact import redact, remember
from irflow.tasks.core.runs import order_run
from irflow.tasks.core.schema import Dataset, InputError, IrflowError
from irflow.tasks.retrieve.base import Searcher
from irflow.tasks.retrieve.ranking import add_counts, against_dataset, number, top_hits
from irflow.tasks.systems.external import HttpSpec
from irflow.tasks.systems.http_options import HttpOptions, dense_spec, fill, resolve
from irflow.tasks.systems.labels import default_label


class ServiceError(IrflowError):
    """A search service answered in another shape than its options describe."""


def dig(value: Any, path: tuple[str, ...]) -> Any:
    """The value at a dotted path (``hits.hits``, ``_source.doc_id``; list indices as numbers)."""
    for part in path:
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


class HttpSearcher(Searcher[HttpSpec]):
    """Sends each query to the service; thread-safe, so the load curve can call it concurrently."""

    def __init__(self, dataset: Dataset, spec: HttpSpec) -> None:
        super().__init__(dataset, spec)
        self.options: HttpOptions = resolve(spec.options)
        self.load_levels = self.options.load
        self.who = f"system {str(spec)!r}"
        self.label = default_label(spec)  # the progress line's name: host:port/path
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self._secrets: list[str] = []
        if self.options.auth_env:
            token = os.environ.get(self.options.auth_env, "")
            if not token:
                raise InputError(f"{self.who}: the environment variable {self.options.auth_env} (auth_env) is not set")
            self._secrets.append(token)
            remember(token)
            scheme = self.options.auth_scheme
            headers[self.options.auth_header] = f"{scheme} {token}" if scheme else token
        self.client: Any
        if keep_alive_usable(spec.url):  # a plain keep-alive connection per thread: the cheapest round trip
            self.client = KeepAliveClient(spec.url, headers, self.options.timeout)
        else:  # a proxy applies: httpx honours the environment's proxy settings
            import httpx

            connections = max(self.options.concurrency, *self.options.load, 1)
            self.client = httpx.Client(
                headers=headers,
                timeout=self.options.timeout,
                limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            )
        weakref.finalize(self, self.client.close)
        policy = RetryPolicy(retries=self.options.retries, backoff=0.25, max_backoff=8.0)
        hint = f"check {self.options.auth_env}" if self.options.auth_env else "does it need a token? see auth_env"
        self.call = Call(spec.url, self.who, tuple(self._secrets), policy, hint)
        self._corpus_ids: frozenset[str] | None = None
        self.info.update(
            http_url=spec.url,
            http_auth_env=self.options.auth_env,
            http_concurrency=self.options.concurrency,
        )
        self._dense: Any = None
        if self.options.model:  # the request carries the query vector: irflow embeds the queries
            from irflow.tasks.embed.vectors import api_spent, model_for

            self._dense = dense_spec(self.options.model)
            self._model = model_for(self._dense)
            self._spent = api_spent(self._model)  # what embedding the queries costs (API models)
            self._prompt = self._model.prompt("query", self._dense.query_prompt)
            self._encoding = threading.Lock()
            self.info.update(http_model=self.options.model, model_identity=self._model.identity)

    def _vectors(self, texts: list[str], queries: pd.DataFrame | None = None) -> list[Any]:
        """One query vector per text (a list of floats), or ``None`` each when the request carries none: the
        dataset's own ``queries`` through the embedding cache, other texts encoded on the spot."""
        if self._dense is None:
            return [None] * len(texts)
        if queries is not None and queries is self.dataset.queries:
            from irflow.tasks.embed.vectors import embed_queries

            embedded = embed_queries(self.dataset, self._dense, model=self._model)
            self.info["queries_encoded"] = int(self.info.get("queries_encoded", 0)) + embedded.encoded
            by_id = dict(zip(embedded.ids, embedded.vectors))
            vectors = [by_id[q] for q in queries["query_id"].astype(str)]
        else:
            from irflow.tasks.embed.inference import encode

            d = self._dense
            with self._encoding:  # one model instance, one encode at a time (the load curve calls from threads)
                vectors = list(encode(self._model, texts, prompt=self._prompt, max_seq_length=d.max_seq_length))
        self.info.update(self._spent())
        return [np.asarray(v, dtype=np.float32).tolist() for v in vectors]

    def _query(self, text: str, k: int, vector: list[float] | None = None) -> tuple[list[str], list[float]]:
        """One round trip: the answer's ``k`` best hits as ``(doc ids, scores)`` in the service's order
        (distances negated, so higher is better everywhere after this)."""
        body = fill(self.options.template, text, k, vector)
        docs, scores = self._hits(self.call.post(self.client, body).json)
        if self.options.distance:
            scores = [-s for s in scores]
        return top_hits(docs, scores, k)  # a service that sends more than asked: only k are kept

    def _hits(self, answer: Any) -> tuple[list[str], list[float]]:
        """The ids and scores of an answer's hits. The common shape (objects down both paths, string or
        integer ids, numeric scores) is read with one comprehension per path step; anything else goes
        through :meth:`_hits_checked`, which reads every shape the paths allow and names a bad hit."""
        o = self.options
        hits = dig(answer, o.hits)
        if not isinstance(hits, list):
            shape = redact(repr(answer)[:200], self._secrets)
            raise ServiceError(f"{self.who}: no list of hits at {'.'.join(o.hits)!r} in the answer {shape}")
        try:
            docs, scores = _column(hits, o.id), _column(hits, o.score)
        except (KeyError, TypeError, IndexError):
            return self._hits_checked(hits)
        if all(type(s) is float or type(s) is int for s in scores) and _finite(scores):
            if all(type(d) is str for d in docs):
                return docs, scores
            if all(type(d) is int for d in docs):
                return [str(d) for d in docs], scores
        return self._hits_checked(hits)

    def _hits_checked(self, hits: list[Any]) -> tuple[list[str], list[float]]:
        o = self.options
        docs, scores = [], []
        for i, hit in enumerate(hits):
            doc, score = dig(hit, o.id), number(dig(hit, o.score))
            if doc is None or isinstance(doc, (dict, list, bool)) or score is None:
                raise ServiceError(
                    f"{self.who}: hit {i + 1} has no id at {'.'.join(o.id)!r} or no finite score at "
                    f"{'.'.join(o.score)!r}: {redact(repr(hit)[:200], self._secrets)}"
                )
            docs.append(str(doc))
            scores.append(score)
        return docs, scores

    def query(self, query_id: str, text: str, depth: int) -> Any:
        """The round trip of one query (after embedding it, when the request carries its vector), with the
        answer decoded into ``(doc ids, scores)``."""
        return self._query(text, depth, self._vectors([text])[0])

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        """Every query's hits collected as plain lists (one request after another at concurrency 1, else
        ``concurrency`` at a time), then one run table built from them, checked and ordered at once."""
        qids = queries["query_id"].astype(str).tolist()
        texts = queries["text"].fillna("").astype(str).tolist()
        vectors = self._vectors(texts, queries)
        if len(texts) == 1:
            return self._single(qids[0], *self._query(texts[0], depth, vectors[0]))
        lock = threading.Lock()
        with Progress(f"retrieve {self.label}", len(texts), unit="queries") as progress:  # on a terminal only

            def ask(text: str, vector: Any) -> tuple[list[str], list[float]]:
                answer = self._query(text, depth, vector)
                with lock:
                    progress.advance(1)
                return answer

            if self.options.concurrency == 1:
                answers = [ask(text, vector) for text, vector in zip(texts, vectors)]
            else:
                with ThreadPoolExecutor(max_workers=self.options.concurrency) as pool:
                    answers = list(pool.map(ask, texts, vectors))
        _check_score_direction(answers, self.who, distance=self.options.distance)
        counts = np.fromiter((len(docs) for docs, _ in answers), dtype=np.int64, count=len(answers))
        if not counts.any():  # as an empty run file is: metrics of 0 would read as a (bad) result
            raise ServiceError(
                f"{self.who}: the service answered no hit for any of the {len(answers):,} queries; expected hits "
                "for some (check the URL path, the hits= path and that the service's index holds this corpus)"
            )
        run = pd.DataFrame(
            {
                "query_id": pd.Series(np.repeat(np.asarray(qids, dtype=object), counts), dtype="str"),
                "doc_id": pd.Series(list(chain.from_iterable(docs for docs, _ in answers)), dtype="str"),
                "score": np.fromiter(
                    chain.from_iterable(scores for _, scores in answers), dtype=np.float64, count=int(counts.sum())
                ),
            }
        )
        if any(len(set(docs)) < len(docs) for docs, _ in answers):
            run = run.drop_duplicates(["query_id", "doc_id"], keep="first")  # passage indexes repeat documents
        batch = queries is self.dataset.queries
        kept, counts_dropped = against_dataset(self.dataset, run, self.who, all_queries=batch, overlap=batch)
        add_counts(self.info, counts_dropped)
        return order_run(kept)

    def _single(self, qid: str, docs: list[str], scores: list[float]) -> pd.DataFrame:
        """One query's run table without pandas' per-call overheads (the latency path): the same rules as
        a batch (first hit of a repeated document, documents not in the corpus counted and kept at their
        rank, ``order_run``'s order: score descending, ties by doc id descending)."""
        if self._corpus_ids is None:
            self._corpus_ids = frozenset(self.dataset.corpus["doc_id"].astype(str))
        seen: dict[str, float] = {}
        for doc, score in zip(docs, scores):
            seen.setdefault(doc, score)
        hits = list(seen.items())
        unknown = sum(d not in self._corpus_ids for d in seen)
        if unknown:
            add_counts(self.info, {"unknown_documents": unknown, "unknown_document_hits": unknown})
        hits.sort(key=lambda h: h[0], reverse=True)
        hits.sort(key=lambda h: h[1], reverse=True)  # stable: ties keep doc id descending
        return pd.DataFrame(
            {
                "query_id": pd.Series([qid] * len(hits), dtype="str"),
                "doc_id": pd.Series([d for d, _ in hits], dtype="str"),
                "score": np.fromiter((s for _, s in hits), dtype=np.float64, count=len(hits)),
                "rank": np.arange(1, len(hits) + 1, dtype=np.int64),
            }
        )


def _check_score_direction(answers: list[tuple[list[str], list[float]]], who: str, *, distance: bool) -> None:
    """A search service lists its best hits first. When the scores (distances already negated) rise down
    every answer that has two different ones, they run the wrong way (an L2 collection read as similarities,
    say) and the evaluation would rank each list upside down: stop and say which option fixes it. Stops at
    the first answer that does not rise, so a service that agrees costs a comparison or two."""
    rising = 0
    for _, scores in answers:
        steps = [b - a for a, b in zip(scores, scores[1:], strict=False) if b != a]
        if not steps:
            continue
        if any(step < 0 for step in steps):
            return
        rising += 1
    if rising:
        fix = (
            "they are similarities (higher is better): drop scores=distance"
            if distance
            else "they are distances (lower is better), as an L2 index gives: add scores=distance"
        )
        raise ServiceError(
            f"{who}: in all {rising} answers with different scores the scores rise from the first hit to the "
            f"last, so {fix}"
        )


def _column(hits: list[Any], path: tuple[str, ...]) -> list[Any]:
    """The value at ``path`` in every hit (objects all the way down; raises where a hit is otherwise)."""
    values = hits
    for part in path:
        values = [value[part] for value in values]
    return values


def _finite(scores: list[float]) -> bool:
    """Whether every score is a finite float (a finite sum says so at once; else each is checked)."""
    try:
        return math.isfinite(sum(scores)) or all(math.isfinite(s) for s in scores)
    except OverflowError:  # an integer too large for a float
        return False
