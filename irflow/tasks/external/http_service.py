"""``http:<url>``: a live search service in the loop. Each query is one request; the answer's hits are
the ranking (see :mod:`irflow.tasks.external.http_options` for the request and answer shapes).

A batch (the retrieval of every query) runs ``concurrency`` requests at a time; the latency stage
sends one query at a time (p50/p95/p99 end to end) and then the load curve (queries/s and p95 at
each level of ``load``). 429 and 5xx answers are retried (``retries``), waiting what ``Retry-After``
says (:mod:`irflow.tasks.http_client`). The token named by ``auth_env`` is read from the environment
when the system is prepared, sent in a header, and never stored, tracked or shown: error bodies that
echo it are redacted.
"""

from __future__ import annotations

import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.external.http_options import HttpOptions, fill, resolve
from irflow.tasks.external.ranking import add_counts, against_dataset, number
from irflow.tasks.external.specs import HttpSpec
from irflow.tasks.http_client import Call, KeepAliveClient, RetryPolicy, keep_alive_usable, redact
from irflow.tasks.retrieve import Searcher
from irflow.tasks.runs import order_run
from irflow.tasks.schema import Dataset, InputError, IrflowError


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
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self._secrets: list[str] = []
        if self.options.auth_env:
            token = os.environ.get(self.options.auth_env, "")
            if not token:
                raise InputError(f"{self.who}: the environment variable {self.options.auth_env} (auth_env) is not set")
            self._secrets.append(token)
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

    def _query(self, text: str, k: int) -> list[tuple[str, float]]:
        o = self.options
        body = fill(o.template, text, k)
        answer = self.call.post(self.client, body).json
        hits = dig(answer, o.hits)
        if not isinstance(hits, list):
            shape = redact(repr(answer)[:200], self._secrets)
            raise ServiceError(f"{self.who}: no list of hits at {'.'.join(o.hits)!r} in the answer {shape}")
        out = []
        for i, hit in enumerate(hits):
            doc, score = dig(hit, o.id), number(dig(hit, o.score))
            if doc is None or isinstance(doc, (dict, list, bool)) or score is None:
                raise ServiceError(
                    f"{self.who}: hit {i + 1} has no id at {'.'.join(o.id)!r} or no finite score at "
                    f"{'.'.join(o.score)!r}: {redact(repr(hit)[:200], self._secrets)}"
                )
            out.append((str(doc), score))
        return out

    def query(self, query_id: str, text: str, depth: int) -> Any:
        """The round trip of one query, with the answer decoded into ``(doc id, score)`` hits."""
        return self._query(text, depth)

    def _search(self, queries: pd.DataFrame, depth: int) -> pd.DataFrame:
        qids = queries["query_id"].astype(str).tolist()
        texts = queries["text"].fillna("").astype(str).tolist()
        if len(texts) == 1:
            return self._single(qids[0], self._query(texts[0], depth))
        with ThreadPoolExecutor(max_workers=self.options.concurrency) as pool:
            answers = list(pool.map(lambda t: self._query(t, depth), texts))
        rows = [(q, d, s) for q, hits in zip(qids, answers) for d, s in hits]
        run = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"]).astype(
            {"query_id": "str", "doc_id": "str", "score": "float64"}
        )
        run = run.drop_duplicates(["query_id", "doc_id"], keep="first")  # passage indexes repeat documents
        batch = queries is self.dataset.queries
        kept, counts = against_dataset(self.dataset, run, self.who, all_queries=batch, overlap=batch)
        add_counts(self.info, counts)
        return order_run(kept)

    def _single(self, qid: str, hits: list[tuple[str, float]]) -> pd.DataFrame:
        """One query's run table without pandas' per-call overheads (the latency path): the same rules as
        a batch (first hit of a repeated document, unknown documents dropped and counted, ``order_run``'s
        order: score descending, ties by doc id descending)."""
        if self._corpus_ids is None:
            self._corpus_ids = frozenset(self.dataset.corpus["doc_id"].astype(str))
        seen: dict[str, float] = {}
        for doc, score in hits:
            seen.setdefault(doc, score)
        known = [(d, s) for d, s in seen.items() if d in self._corpus_ids]
        if len(known) < len(seen):
            add_counts(self.info, {"unknown_documents": len(seen) - len(known), "dropped_hits": len(seen) - len(known)})
        known.sort(key=lambda h: h[0], reverse=True)
        known.sort(key=lambda h: h[1], reverse=True)  # stable: ties keep doc id descending
        return pd.DataFrame(
            {
                "query_id": pd.Series([qid] * len(known), dtype="str"),
                "doc_id": pd.Series([d for d, _ in known], dtype="str"),
                "score": np.fromiter((s for _, s in known), dtype=np.float64, count=len(known)),
                "rank": np.arange(1, len(known) + 1, dtype=np.int64),
            }
        )
