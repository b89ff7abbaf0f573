"""Encoding and scoring with a local model on ONNX Runtime or OpenVINO (graphs from ``tasks.exports``),
with the model's own tokenizer, truncation and pooling, batched by length as sentence-transformers does.

* ``backend=onnx``: ONNX Runtime on the fused graph, fp32 or int8 (``quantize=int8``).
* ``backend=openvino``: OpenVINO on the plain graph at ``precision`` fp32, bf16 or fp16 (OpenVINO's own
  default on a CPU with bf16 units is bf16; irflow asks for what the spec says), or its NNCF int8 graph.

Vectors are L2-normalised mean or CLS pooled, as the model's sentence-transformers config says.
Cross-encoders are not exported yet (no cross-encoder with weights is available offline to check one
against torch); a bi-encoder rerank runs on these backends through ``encode_exported``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.tasks import exports

if TYPE_CHECKING:
    from irflow.tasks.models import ResolvedModel

Runner = Callable[[dict[str, np.ndarray]], np.ndarray]
_OPENVINO_PRECISIONS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}


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


def _batches(tokenizer: Any, texts: list[str], max_length: int, batch_size: int) -> Iterator[tuple[Any, Any]]:
    """(row indices, tokenised batch) in order of decreasing length, so each batch pads little."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    for start in range(0, len(texts), batch_size):
        rows = order[start : start + batch_size]
        batch = [texts[i] for i in rows]
        yield rows, tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="np")


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
    from irflow.tasks.models import BackendUnavailableError

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


def default_max_length(model_dir: str) -> int:
    """The model's own max_seq_length (sentence_bert_config.json), else its position limit, else 512."""
    root = Path(model_dir)
    try:
        return int(json.loads((root / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        return min(512, int(json.loads((root / "config.json").read_text())["max_position_embeddings"]))
    except (OSError, ValueError, KeyError, TypeError):
        return 512
