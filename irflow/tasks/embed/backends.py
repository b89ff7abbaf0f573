"""Encoding and scoring with a local model on ONNX Runtime or OpenVINO (graphs from ``tasks.embed.exports``),
with the model's own tokenizer, truncation and pooling, batched by length as sentence-transformers does.

* ``backend=onnx``: ONNX Runtime on the fused graph, fp32 or int8 (``quantize=int8``).
* ``backend=openvino``: OpenVINO on the plain graph at ``precision`` fp32, bf16 or fp16 (OpenVINO's own
  default on a CPU with bf16 units is bf16; irflow asks for what the spec says), or its NNCF int8 graph.

Vectors are L2-normalised mean or CLS pooled, as the model's sentence-transformers config says; a
cross-encoder's one logit goes through its activation (sigmoid unless its config names another), so its
scores are ``CrossEncoder.predict``'s.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from irflow.tasks.core.stop import check_stop
from irflow.tasks.embed import exports
from irflow.tasks.embed.models import BackendUnavailableError, ResolvedModel

Runner = Callable[[dict[str, np.ndarray]], np.ndarray]
Pair = tuple[str, str]
_OPENVINO_PRECISIONS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}
_ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Identity": lambda x: x,
}


def encode_exported(
    model: ResolvedModel, texts: Sequence[str], *, prompt: str, max_seq_length: int | None, batch_size: int
) -> np.ndarray:
    """Normalised float32 vectors of ``texts`` (``prompt`` prepended) from ``model``'s export."""
    run, wanted = _runner(model)
    tokenizer = _tokenizer(model.path)
    pooling = _pooling(model.path)
    inputs = [prompt + t for t in texts]
    out: np.ndarray | None = None
    for rows, enc in _batches(tokenizer, inputs, max_seq_length or default_max_length(model.path), batch_size):
        check_stop()  # SIGTERM ends an encode in a worker thread at the next batch
        hidden = run({k: v.astype(np.int64) for k, v in enc.items() if k in wanted})
        if pooling == "cls":
            vectors = hidden[:, 0]
        else:
            mask = enc["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
        if out is None:
            out = np.zeros((len(inputs), vectors.shape[1]), dtype=np.float32)
        out[rows] = vectors
    if out is None:
        return np.zeros((0, 0), dtype=np.float32)
    return out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)


def load_exported(model: ResolvedModel) -> None:
    """Export (once), load and compile ``model``'s graph and its tokenizer, as the first encode would."""
    _runner(model)
    _tokenizer(model.path)


def score_exported(model: ResolvedModel, pairs: Sequence[Pair], *, batch_size: int) -> np.ndarray:
    """A cross-encoder's score of each (query, document) pair from ``model``'s export, as float64."""
    activation = _activation(model.path)
    run, wanted = _runner(model)
    tokenizer = _tokenizer(model.path)
    scores = np.zeros(len(pairs), dtype=np.float64)
    for rows, enc in _batches(tokenizer, list(pairs), default_max_length(model.path), batch_size):
        logits = run({k: v.astype(np.int64) for k, v in enc.items() if k in wanted})
        scores[rows] = activation(logits[:, 0].astype(np.float64))
    return scores


def _batches(
    tokenizer: Any, items: list[str] | list[Pair], max_length: int, batch_size: int
) -> Iterator[tuple[Any, Any]]:
    """(row indices, tokenised batch) of texts or (query, document) pairs in order of decreasing length, so
    each batch pads little; pairs are truncated longest-first, as sentence-transformers does."""
    order = np.argsort([-len(t) if isinstance(t, str) else -len(t[0]) - len(t[1]) for t in items], kind="stable")
    for start in range(0, len(items), batch_size):
        rows = order[start : start + batch_size]
        batch = [items[i] for i in rows]
        segments = [batch] if isinstance(batch[0], str) else [list(s) for s in zip(*batch, strict=True)]
        yield rows, tokenizer(*segments, padding=True, truncation=True, max_length=max_length, return_tensors="np")


def _runner(model: ResolvedModel) -> tuple[Runner, set[str]]:
    if model.backend == "onnx":
        return _onnx_runner(str(exports.onnx_export(model, int8=model.quantize == "int8")))
    if model.quantize == "int8":
        return _openvino_runner(str(exports.openvino_int8_export(model)), "fp32")
    return _openvino_runner(str(exports.plain_export(model)), model.precision)


@functools.lru_cache(maxsize=4)
def _onnx_runner(path: str) -> tuple[Runner, set[str]]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return (lambda feed: session.run(None, feed)[0]), {i.name for i in session.get_inputs()}


@functools.lru_cache(maxsize=4)
def _openvino_runner(path: str, precision: str) -> tuple[Runner, set[str]]:
    import openvino

    core = openvino.Core()
    check_openvino_precision(precision, core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    compiled = core.compile_model(
        core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": _OPENVINO_PRECISIONS[precision]}
    )
    request = compiled.create_infer_request()
    output = compiled.outputs[0]
    return (lambda feed: request.infer(feed)[output]), {i.get_any_name() for i in compiled.inputs}


def check_openvino_precision(precision: str, capabilities: Sequence[str]) -> None:
    """Refuse a precision the CPU has no units for (OpenVINO would silently run fp32 instead)."""
    needed = {"bf16": "BF16", "fp16": "FP16"}.get(precision)
    if needed and needed not in capabilities:
        raise BackendUnavailableError(
            f"precision={precision} needs a CPU with {needed} units, which OpenVINO does not find here "
            f"(it offers: {', '.join(capabilities)}); use precision=fp32 or quantize=int8"
        )


@functools.lru_cache(maxsize=4)
def _tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _pooling(model_dir: str) -> str:
    """The sentence-transformers pooling mode of the model: ``mean`` or ``cls``."""
    root = Path(model_dir)
    try:
        modules = json.loads((root / "modules.json").read_text())
        pool_dir = next(m["path"] for m in modules if m["type"].endswith("Pooling"))
        config = json.loads((root / pool_dir / "config.json").read_text())
    except (OSError, ValueError, StopIteration, KeyError):
        return "mean"
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_mean_tokens", True):
        return "mean"
    raise ValueError(f"{root / pool_dir / 'config.json'}: only mean or CLS pooling run on the onnx/openvino backends")


def _activation(model_dir: str) -> Callable[[np.ndarray], np.ndarray]:
    """The function ``CrossEncoder.predict`` puts on the logit: the one the model's config names
    (sentence-transformers >= 4, or its older key), else sigmoid for a one-logit model."""
    root = Path(model_dir)
    config = _json(root / "config.json")
    named = (
        _json(root / "config_sentence_transformers.json").get("activation_fn")
        or (config.get("sentence_transformers") or {}).get("activation_fn")
        or config.get("sbert_ce_default_activation_function")
    )
    if (config.get("num_labels") or len(config.get("id2label") or [None])) != 1:
        raise ValueError(f"{root / 'config.json'}: only one-logit cross-encoders run on the onnx/openvino backends")
    name = str(named or "Sigmoid").rsplit(".", 1)[-1]
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"{root}: the activation {named!r} does not run on the onnx/openvino backends "
            f"(supported: {', '.join(_ACTIVATIONS)}); use backend=torch"
        )
    return _ACTIVATIONS[name]


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def default_max_length(model_dir: str) -> int:
    """The model's own max_seq_length (sentence_bert_config.json), else the smaller of its tokenizer's
    model_max_length and its position limit (what sentence-transformers truncates to), else 512."""
    root = Path(model_dir)
    try:
        return int(_json(root / "sentence_bert_config.json")["max_seq_length"])
    except (KeyError, ValueError, TypeError):
        pass
    limits = [_json(root / "config.json").get("max_position_embeddings"), 512]
    limits.append(_json(root / "tokenizer_config.json").get("model_max_length"))
    return min(int(x) for x in limits if isinstance(x, int | float) and 0 < x)
