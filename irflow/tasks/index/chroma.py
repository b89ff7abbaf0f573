"""A Chroma server as a dense index: irflow loads its own cached vectors into a collection it
creates, queries it, and deletes it again.

The server is ``IRFLOW_CHROMA_URL`` (default :data:`DEFAULT_URL`); start one with
``chroma run --host 127.0.0.1 --port 8000 --path DIR``. A collection is named
``irflow-<random hex>`` and carries metadata saying who made it (host, pid, time). It lives as
long as its :class:`ChromaIndex`: ``close()``, garbage collection or interpreter exit delete it
(``weakref.finalize``). A collection left by a killed run is deleted by the next build against
the same server once stale: its process is gone (same host) or it is older than
:data:`STALE_AFTER_S`. Collections without irflow's name prefix *and* owner mark are never touched.

Vectors go in as they are (no embedding function in the database), ids are row numbers, and the
space is inner product, as FAISS flat: Chroma's ``ip`` distance is ``1 - q·v``, so the score
returned is ``1 - distance`` (float32). ``chromadb`` (``pip install 'irflow[chroma]'``) is imported
only when a Chroma index is built.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import time
import uuid
import weakref
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from irflow.tasks.core.http_client import bounded_hook
from irflow.tasks.core.redact import redact
from irflow.tasks.core.schema import InputError, IrflowError
from irflow.tasks.index.recall import measure_recall

URL_ENV = "IRFLOW_CHROMA_URL"
DEFAULT_URL = "http://127.0.0.1:8000"
PREFIX = "irflow-"
OWNER = {"irflow_owner": "irflow"}  # metadata mark of every collection irflow creates
STALE_AFTER_S = 24 * 3600.0
CONNECT_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 300.0
QUERY_BATCH = 256
SPACE = "ip"
PARAMS = {"M": "max_neighbors", "efConstruction": "ef_construction", "efSearch": "ef_search"}  # spec -> Chroma

log = logging.getLogger(__name__)


class ChromaError(IrflowError):
    """The Chroma server could not be reached, or it refused or failed a request."""


def chroma_url() -> str:
    """The Chroma server irflow uses: ``$IRFLOW_CHROMA_URL`` or :data:`DEFAULT_URL`."""
    return (os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def _split_url(url: str) -> tuple[str, int, bool]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme not in ("http", "https") or not parts.hostname or port == -1 or parts.path not in ("", "/"):
        raise InputError(f"{URL_ENV}={url!r} is not a Chroma server address: expected http[s]://HOST[:PORT]")
    ssl = parts.scheme == "https"
    return parts.hostname, port or (443 if ssl else 8000), ssl


def shown_url(url: str) -> str:
    """``url`` as messages show it: its password (and any other known secret) as ``***``."""
    return redact(url)


def _heartbeat_problem(beat: Any) -> str | None:
    """Why an HTTP 200 answer to ``/api/v2/heartbeat`` is not Chroma's (``{"nanosecond heartbeat": N}``), or None."""
    try:
        body = beat.json()
    except ValueError:
        kind = beat.headers.get("content-type", "").split(";")[0] or "no content type"
        return f"answered /api/v2/heartbeat with something that is not JSON ({kind})"
    if not isinstance(body, dict) or "nanosecond heartbeat" not in body:
        return "answered /api/v2/heartbeat without Chroma's 'nanosecond heartbeat'"
    return None


def connect(url: str | None = None) -> Any:
    """A ``chromadb`` HTTP client for the server at ``url`` (default :func:`chroma_url`), after
    checking within :data:`CONNECT_TIMEOUT_S` that a Chroma server answers there."""
    import httpx

    url = url or chroma_url()
    host, port, ssl = _split_url(url)
    shown = shown_url(url)
    try:
        chromadb = importlib.import_module("chromadb")
    except ImportError:
        raise ChromaError("index=chroma needs the 'chromadb' package: pip install 'irflow[chroma]'") from None
    try:
        beat = httpx.get(f"{url}/api/v2/heartbeat", timeout=CONNECT_TIMEOUT_S)
    except httpx.HTTPError as err:
        raise ChromaError(
            f"no Chroma server answers at {shown} ({URL_ENV}): {type(err).__name__}: {err}; start one with "
            f"`chroma run --host 127.0.0.1 --port {port} --path DIR` or point {URL_ENV} at yours"
        ) from None
    if beat.status_code != 200:
        raise ChromaError(f"{shown} ({URL_ENV}) answered HTTP {beat.status_code} to /api/v2/heartbeat: not Chroma")
    problem = _heartbeat_problem(beat)
    if problem:
        raise ChromaError(f"{shown} ({URL_ENV}) {problem}: not a Chroma server; point {URL_ENV} at one")
    settings = chromadb.Settings(anonymized_telemetry=False)
    try:
        client = chromadb.HttpClient(host=host, port=port, ssl=ssl, settings=settings)
    except Exception as err:  # the server answered the heartbeat but not the client's own checks
        raise ChromaError(
            f"the Chroma client could not start against {shown} ({URL_ENV}): {type(err).__name__}: {err}"
        ) from None
    session = getattr(getattr(client, "_server", None), "_session", None)
    if session is not None:  # the client waits forever by default
        session.timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        session.event_hooks["response"].append(bounded_hook(f"Chroma at {shown}"))  # every body within limits
    return client


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(name: str, metadata: dict[str, Any] | None, now: float | None = None) -> bool:
    """Whether a collection is an abandoned irflow collection: irflow's prefix and owner mark, and
    its process gone (same host) or older than :data:`STALE_AFTER_S`."""
    meta = metadata or {}
    if not name.startswith(PREFIX) or any(meta.get(k) != v for k, v in OWNER.items()):
        return False
    now = time.time() if now is None else now
    created = meta.get("irflow_created")
    if isinstance(created, int | float) and now - float(created) > STALE_AFTER_S:
        return True
    pid = meta.get("irflow_pid")
    return meta.get("irflow_host") == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid)


def sweep_stale(client: Any) -> list[str]:
    """Delete the stale irflow collections of the server (see :func:`is_stale`); returns their names."""
    gone = []
    for collection in client.list_collections():
        if is_stale(collection.name, collection.metadata):
            try:
                client.delete_collection(collection.name)
            except Exception as err:  # another run swept it first, or the server refused: not ours to fail on
                log.warning("could not delete stale Chroma collection %s: %s", collection.name, err)
                continue
            log.info("deleted stale Chroma collection %s", collection.name)
            gone.append(collection.name)
    return gone


def _drop(client: Any, name: str, url: str) -> None:
    try:
        client.delete_collection(name)
    except Exception as err:  # at exit or after the server went away: say so, never raise from a finalizer
        if type(err).__name__ != "NotFoundError":
            log.warning("could not delete Chroma collection %s at %s: %s", name, url, err)


class ChromaIndex:
    """Vectors in a Chroma collection that this object owns (deleted by ``close()`` or when it is
    collected). Same interface as ``tasks.index.VectorIndex``: ``search``, ``tracking``."""

    kind = "chroma"

    def __init__(self, client: Any, collection: Any, url: str, vectors: np.ndarray, build_seconds: float) -> None:
        self.client, self.collection, self.url = client, collection, url
        self.name: str = collection.name
        self.vectors = vectors
        self.size = len(vectors)
        self.build_seconds = build_seconds
        self.hnsw: dict[str, Any] = dict((collection.configuration_json or {}).get("hnsw") or {})
        self.server_version = str(client.get_version())
        self.recall: dict[str, float] | None = None
        self._finalizer = weakref.finalize(self, _drop, client, self.name, url)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Delete the collection (idempotent)."""
        self._finalizer()

    def __enter__(self) -> ChromaIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by inner product: ``(scores float32 (nq, k), rows int64 (nq, k))``; row -1 = no hit."""
        scores, rows = self._search(queries, k)
        if self.recall is None and len(rows):
            self.recall = measure_recall(self.vectors, queries, self._search, rows)
        return scores, rows

    def _search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.closed:
            raise ChromaError(f"Chroma collection {self.name} at {self.url} was closed")
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = max(0, min(int(k), self.size))
        scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
        rows = np.full((len(queries), k), -1, dtype=np.int64)
        if k == 0 or len(queries) == 0:
            return scores, rows
        for start in range(0, len(queries), QUERY_BATCH):
            batch = queries[start : start + QUERY_BATCH]
            try:
                found = self.collection.query(query_embeddings=batch, n_results=k, include=["distances"])
            except Exception as err:
                raise ChromaError(f"Chroma query on {self.name} at {self.url}: {type(err).__name__}: {err}") from None
            for i, (ids, distances) in enumerate(zip(found["ids"], found["distances"])):
                rows[start + i, : len(ids)] = np.asarray(ids, dtype=np.int64)
                scores[start + i, : len(ids)] = np.float32(1.0) - np.asarray(distances, dtype=np.float32)
        return scores, rows

    def tracking(self) -> dict[str, Any]:
        """Flat parameters for experiment tracking: the HNSW settings as the server reports them (under
        the FAISS names M, efConstruction, efSearch where they have one), versions, recall vs exact."""
        chromadb = importlib.import_module("chromadb")
        names = {chroma: spec for spec, chroma in PARAMS.items()}
        out: dict[str, Any] = {"index": self.kind, "index_build_seconds": round(self.build_seconds, 4)}
        out["index_from_cache"] = False
        out.update({f"index_{names.get(key, key)}": value for key, value in sorted(self.hnsw.items())})
        out.update(index_chroma_server=self.server_version, index_chroma_client=chromadb.__version__)
        out.update({f"index_{name}": value for name, value in (self.recall or {}).items()})
        return out


def build_chroma_index(vectors: np.ndarray, params: dict[str, int], *, url: str | None = None) -> ChromaIndex:
    """Load ``vectors`` (row i = id ``"i"``) into a new inner-product collection with HNSW ``params``
    (``M``, ``efConstruction``, ``efSearch``; absent = the server's defaults) at ``url``."""
    url = (url or chroma_url()).rstrip("/")
    client = connect(url)
    url = shown_url(url)  # from here on only named in messages
    try:
        sweep_stale(client)
    except Exception as err:  # listing may be forbidden on a shared server: cleaning is best effort
        log.warning("could not list Chroma collections at %s to clean stale ones: %s", url, err)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    hnsw: dict[str, Any] = {"space": SPACE, **{PARAMS[k]: int(v) for k, v in params.items()}}
    meta = {**OWNER, "irflow_host": socket.gethostname(), "irflow_pid": os.getpid(), "irflow_created": time.time()}
    name = PREFIX + uuid.uuid4().hex
    start = time.perf_counter()
    try:
        collection = client.create_collection(
            name, configuration={"hnsw": hnsw}, metadata=meta, embedding_function=None
        )
    except Exception as err:
        raise ChromaError(f"Chroma at {url} refused collection {name} ({hnsw}): {type(err).__name__}: {err}") from None
    try:
        batch = max(1, int(client.get_max_batch_size()))
        for first in range(0, len(vectors), batch):
            ids = [str(i) for i in range(first, min(first + batch, len(vectors)))]
            collection.add(ids=ids, embeddings=vectors[first : first + batch])
        count = collection.count()
        if count != len(vectors):
            raise ChromaError(f"Chroma collection {name} at {url} holds {count} vectors after loading {len(vectors)}")
        seconds = time.perf_counter() - start
        collection = client.get_collection(name)  # the settings as the server stored them
    except BaseException as err:  # Ctrl-C included: never leave a half-loaded collection behind
        _drop(client, name, url)
        if isinstance(err, ChromaError) or not isinstance(err, Exception):
            raise
        raise ChromaError(f"loading vectors into Chroma {name} at {url} failed: {type(err).__name__}: {err}") from None
    return ChromaIndex(client, collection, url, vectors, seconds)
