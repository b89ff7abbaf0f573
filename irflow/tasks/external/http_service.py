"""``http:<url>``: a live search service in the loop. Each query is one request; the answer's hits are
the ranking (see :mod:`irflow.tasks.external.http_options` for the request and answer shapes).

A batch (the retrieval of every query) runs ``concurrency`` requests at a time; the latency stage
sends one query at a time (p50/p95/p99 end to end) and then the load curve (queries/s and p95 at
each level of ``load``). 429 and 5xx answers are retried (``retries``), waiting what ``Retry-After``
says. The token named by ``auth_env`` is read from the environment when the system is prepared, sent
in a header, and never stored, tracked or shown: error bodies that echo it are redacted.
"""

from __future__ import annotations

import os
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from typing import Any

import numpy as np
import pandas as pd

from irflow.tasks.external.http_options import HttpOptions, fill, resolve
from irflow.tasks.external.ranking import add_counts, against_dataset, number
from irflow.tasks.external.specs import HttpSpec
from irflow.tasks.retrieve import Searcher
from irflow.tasks.runs import order_run
from irflow.tasks.schema import Dataset, InputError, IrflowError

MAX_RETRY_WAIT = 60.0  # seconds: a longer Retry-After fails instead of stalling the evaluation


class ServiceError(IrflowError):
    """A search service failed: refused, unreachable, out of retries, or answered in another shape."""


def redact(text: str, secrets: list[str]) -> str:
    """``text`` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (seconds or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


# --- ISOLATED FALLBACK -------------------------------------------------------------------------
# irflow's shared HTTP client layer (irflow/tasks/http_client.py: retries, Retry-After, limits,
# redaction) was not in the tree when this was written. This one function is the only place that
# retries; replace its body by a call into that layer when it lands.
def post_json(client: Any, url: str, body: Any, *, retries: int, secrets: list[str], who: str) -> Any:
    """POST ``body`` as JSON, retrying 429/5xx and connection failures (``Retry-After`` honoured,
    else 0.25 s doubling); returns the decoded JSON answer. Errors are redacted of ``secrets``."""
    import httpx

    for attempt in range(retries + 1):
        wait = min(0.25 * 2**attempt, 8.0)
        try:
            response = client.post(url, json=body)
        except httpx.TransportError as exc:
            problem = f"{type(exc).__name__}: {exc}"
        else:
            if response.status_code < 300:
                try:
                    return response.json()
                except ValueError:
                    shown = redact(response.text[:200], secrets)
                    raise ServiceError(f"{who}: the answer is not JSON: {shown!r}") from None
            problem = f"HTTP {response.status_code}: {redact(response.text[:300], secrets)!r}"
            if response.status_code != 429 and response.status_code < 500:
                raise ServiceError(f"{who}: {url} answered {problem}")
            after = _retry_after(response.headers.get("Retry-After"))
            if after is not None:
                if after > MAX_RETRY_WAIT:
                    raise ServiceError(f"{who}: {url} asks to retry after {after:.0f} s (> {MAX_RETRY_WAIT:.0f} s)")
                wait = after
        if attempt < retries:
            time.sleep(wait)
    raise ServiceError(f"{who}: {url} failed {retries + 1} times; last: {redact(problem, secrets)}")


# --- end of the isolated fallback --------------------------------------------------------------


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
        import httpx

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
        connections = max(self.options.concurrency, *self.options.load, 1)
        self.client = httpx.Client(
            headers=headers,
            timeout=self.options.timeout,
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        )
        weakref.finalize(self, self.client.close)
        self._corpus_ids: frozenset[str] | None = None
        self.info.update(
            http_url=spec.url,
            http_auth_env=self.options.auth_env,
            http_concurrency=self.options.concurrency,
        )

    def _query(self, text: str, k: int) -> list[tuple[str, float]]:
        o = self.options
        body = fill(o.template, text, k)
        answer = post_json(self.client, self.spec.url, body, retries=o.retries, secrets=self._secrets, who=self.who)
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
