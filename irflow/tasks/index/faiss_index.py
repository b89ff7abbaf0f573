"""FAISS indexes over cached embedding matrices: exact inner product by default, HNSW, IVF and
IVF-PQ for large corpora, ``blocks`` (exact, block by block: ``tasks.index.blocks``); ``chroma``
hands the same vectors to a Chroma server (``tasks.index.chroma``).

Vectors are L2-normalised, so inner product is cosine similarity. An approximate index is cached
beside the embeddings it was built from (``<embedding key dir>/index-<kind>-<hash>.faiss``,
written atomically) where the hash covers the build parameters and the matrix shape; search-time
parameters (``efSearch``, ``nprobe``) are applied after loading and do not invalidate it. The
flat index is never cached: building it is a copy of the vectors, which are cached already.
Training uses a fixed seed and HNSW is built on one thread, so a build is deterministic.

Every approximate index measures its quality on the first batch it searches: recall@10 and
recall@100 against exact search over the same vectors (``measure_recall``), tracked as
``index_recall_at_10`` / ``index_recall_at_100``.

``faiss`` is imported inside functions so that importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from irflow.tasks.core.atomic import atomic_path, write_json
from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.index.recall import measure_recall

SEED = 1234
"""Seed of every k-means training (IVF coarse quantizer, PQ codebooks)."""

# Parameter names as FAISS spells them; None = chosen from the data size (see `resolve_params`).
DEFAULT_PARAMS: dict[str, dict[str, int | None]] = {
    "flat": {},
    "hnsw": {"M": 32, "efConstruction": 200, "efSearch": 128},
    "ivf": {"nlist": None, "nprobe": 16},
    "ivfpq": {"nlist": None, "m": None, "nbits": 8, "nprobe": 16},
    "chroma": {"M": None, "efConstruction": None, "efSearch": None},  # None: the server's default
    "blocks": {"block_size": 65536},  # exact, in blocks of 96 MiB at d=384 (tasks.index.blocks); nothing built
}
SEARCH_PARAMS = frozenset({"efSearch", "nprobe"})

ParamsLike = Mapping[str, Any] | Iterable[tuple[str, Any]] | None


class SearchIndex(Protocol):
    """What retrieval needs of an index: FAISS (:class:`VectorIndex`) or a Chroma collection."""

    kind: str
    build_seconds: float

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]: ...

    def tracking(self) -> dict[str, Any]: ...


@dataclass
class VectorIndex:
    """A FAISS index plus what is needed to track it: kind, every parameter used, build time and,
    once it has searched, its recall against exact search (approximate kinds)."""

    index: Any  # faiss.Index
    kind: str
    params: dict[str, int]
    build_seconds: float
    from_cache: bool
    path: Path | None = None
    vectors: np.ndarray | None = None  # what it indexes (approximate kinds): the exact side of recall
    recall: dict[str, float] | None = None

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` by inner product: ``(scores float32 (nq, k), rows int64 (nq, k))``; row -1 = no hit."""
        scores, rows = self._search(queries, k)
        if self.recall is None and self.vectors is not None and len(rows):
            self.recall = measure_recall(self.vectors, queries, self._search, rows)
        return scores, rows

    def _search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        k = max(0, min(int(k), self.size))
        if k == 0 or len(queries) == 0:
            return np.zeros((len(queries), k), np.float32), np.zeros((len(queries), k), np.int64)
        scores, rows = self.index.search(queries, k)
        return scores, rows.astype(np.int64, copy=False)

    def tracking(self) -> dict[str, Any]:
        """Flat parameters for experiment tracking (MLflow params)."""
        out: dict[str, Any] = {
            "index": self.kind,
            "index_build_seconds": round(self.build_seconds, 4),
            "index_from_cache": self.from_cache,
        }
        out.update({f"index_{name}": value for name, value in self.params.items()})
        out.update({f"index_{name}": value for name, value in (self.recall or {}).items()})
        return out


def resolve_params(kind: str, params: ParamsLike, n: int, d: int) -> dict[str, int]:
    """Validate ``params`` (strings from a system spec are accepted) and fill the defaults.

    Automatic values: ``nlist`` = 4·√n capped at n/39 (FAISS wants ≥ 39 training points per list),
    ``m`` = d/8 sub-quantizers when 8 divides d, else d.
    """
    if kind not in DEFAULT_PARAMS:
        raise UnknownNameError(f"unknown index kind {kind!r}; choose one of: {', '.join(DEFAULT_PARAMS)}")
    given = dict(params.items() if isinstance(params, Mapping) else (params or ()))
    valid = DEFAULT_PARAMS[kind]
    unknown = sorted(set(given) - set(valid))
    if unknown:
        choices = ", ".join(valid) or "none"
        raise UnknownNameError(f"unknown parameter(s) {', '.join(unknown)} for index {kind!r}; valid: {choices}")
    out: dict[str, int] = {}
    for name, default in valid.items():
        value = given.get(name, default)
        if value is None and kind == "chroma":
            continue  # left to the server; the collection reports what it used
        if value is None:
            value = _auto(name, n, d)
        try:
            number = int(value)
        except (TypeError, ValueError):
            raise InputError(f"index parameter {name}={value!r} must be an integer") from None
        if number < 1:
            raise InputError(f"index parameter {name}={number} must be positive")
        out[name] = number
    _check_trainable(kind, out, n, d)
    return out


def _auto(name: str, n: int, d: int) -> int:
    if name == "nlist":
        return max(1, min(round(4 * math.sqrt(n)), n // 39))
    if name == "m":
        return d // 8 if d % 8 == 0 else d
    raise AssertionError(name)


def _check_trainable(kind: str, p: dict[str, int], n: int, d: int) -> None:
    if kind in ("ivf", "ivfpq") and p["nlist"] > n:
        raise InputError(f"nlist={p['nlist']} exceeds the {n} vectors to train on; lower nlist")
    if kind == "ivfpq":
        if d % p["m"]:
            raise InputError(f"m={p['m']} must divide the vector dimension {d}")
        if n < 2 ** p["nbits"]:
            raise InputError(f"nbits={p['nbits']} needs at least {2 ** p['nbits']} vectors to train; got {n}")


def build_index(
    vectors: np.ndarray, kind: str = "flat", params: ParamsLike = None, *, cache_dir: str | Path | None = None
) -> SearchIndex:
    """Build (or load from ``cache_dir``) an inner-product index over ``vectors`` (n, d float32).

    Row i of ``vectors`` is row i of every search result. ``chroma`` loads them into a new
    collection of the Chroma server at ``IRFLOW_CHROMA_URL`` (nothing cached; see ``tasks.index.chroma``).
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, d = vectors.shape
    p = resolve_params(kind, params, n, d)
    if kind == "chroma":
        from irflow.tasks.index.chroma import build_chroma_index

        return build_chroma_index(vectors, p)
    if kind == "blocks":
        from irflow.tasks.index.blocks import BlockIndex

        return BlockIndex(vectors, p["block_size"])
    return _build_faiss(vectors, kind, p, cache_dir)


def _build_faiss(vectors: np.ndarray, kind: str, p: dict[str, int], cache_dir: str | Path | None) -> VectorIndex:
    import faiss

    n, d = vectors.shape
    exact_side = vectors if kind != "flat" else None
    build_p = {k: v for k, v in p.items() if k not in SEARCH_PARAMS}
    path = None
    if cache_dir is not None and kind != "flat":
        digest = hashlib.sha256(json.dumps({"n": n, "d": d, **build_p}, sort_keys=True).encode()).hexdigest()
        path = Path(cache_dir) / f"index-{kind}-{digest[:16]}.faiss"
        cached = _load(path, n, d)
        if cached is not None:
            index, seconds = cached
            _apply_search_params(index, p)
            return VectorIndex(index, kind, p, seconds, from_cache=True, path=path, vectors=exact_side)

    start = time.perf_counter()
    index = _new_index(kind, d, build_p)
    if kind == "hnsw":
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # parallel insertion order would make the graph nondeterministic
        try:
            index.add(vectors)
        finally:
            faiss.omp_set_num_threads(threads)
    else:
        if not index.is_trained:
            index.train(vectors)
        index.add(vectors)
    seconds = time.perf_counter() - start
    _apply_search_params(index, p)

    if path is not None:
        with atomic_path(path) as tmp:
            faiss.write_index(index, str(tmp))
        write_json(
            path.with_suffix(".json"),
            {"kind": kind, "params": build_p, "n": n, "d": d, "build_seconds": seconds, "faiss": faiss.__version__},
        )
    return VectorIndex(index, kind, p, seconds, from_cache=False, path=path, vectors=exact_side)


def _new_index(kind: str, d: int, p: dict[str, int]) -> Any:
    import faiss

    ip = faiss.METRIC_INNER_PRODUCT
    if kind == "flat":
        return faiss.IndexFlatIP(d)
    if kind == "hnsw":
        hnsw = faiss.IndexHNSWFlat(d, p["M"], ip)
        hnsw.hnsw.efConstruction = p["efConstruction"]
        return hnsw
    if kind == "ivf":
        ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, p["nlist"], ip)
        ivf.cp.seed = SEED
        return ivf
    ivfpq = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, p["nlist"], p["m"], p["nbits"], ip)
    ivfpq.pq.cp.seed = SEED
    ivfpq.cp.seed = SEED
    return ivfpq


def _apply_search_params(index: Any, p: dict[str, int]) -> None:
    import faiss

    if "efSearch" in p:
        hnsw = faiss.downcast_index(index)
        if not isinstance(hnsw, faiss.IndexHNSW):
            raise TypeError(f"efSearch needs an HNSW index, got {type(hnsw).__name__}")
        hnsw.hnsw.efSearch = p["efSearch"]
    if "nprobe" in p:
        faiss.extract_index_ivf(index).nprobe = p["nprobe"]


def _load(path: Path, n: int, d: int) -> tuple[Any, float] | None:
    """The cached index at ``path`` and its recorded build time, or None if absent or not matching."""
    import faiss

    if not path.is_file():
        return None
    try:
        index = faiss.read_index(str(path))
    except Exception:  # unreadable: rebuild (the atomic write makes this rare)
        return None
    if index.ntotal != n or index.d != d:
        return None
    try:
        seconds = float(json.loads(path.with_suffix(".json").read_text())["build_seconds"])
    except (OSError, ValueError, KeyError):
        seconds = float("nan")
    return index, seconds
