"""ONNX Runtime encoding of a local bi-encoder: an export built once from the local weights (no
network), optionally int8-quantised, cached under the model identity, and run with mean/CLS pooling.

Why not sentence-transformers' ``backend="onnx"``: it needs optimum-onnx, which pins
transformers<4.58 and cannot install beside sentence-transformers 6 (transformers 5). The export
here uses ``torch.onnx.export`` and ``onnxruntime.quantization.quantize_dynamic`` (int8 weights
per output channel, dynamic uint8 activations, as optimum's avx512_vnni preset; per-tensor weights
lose too much: cosine to fp32 0.92-0.96 against 0.98-0.99 per-channel; ONNX Runtime picks the
VNNI / AVX512 / AVX2 kernels of the CPU at run time).

Cache layout: ``cache_dir()/exports/<sha256(weights identity)[:16]>/onnx-<fp32|int8 recipe>.onnx``, published
by an atomic rename under a lock, so concurrent builders export once and readers never see half a file.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from irflow.tasks.atomic import atomic_path, file_lock
from irflow.tasks.config import cache_dir

if TYPE_CHECKING:
    from irflow.tasks.models import ResolvedModel

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def export_path(model: ResolvedModel) -> Path:
    """Where the export for ``model`` (its weights, backend and quantisation) lives in the cache."""
    base = model.identity.split("|")[0]  # the weights' identity; the file name carries the rest
    folder = cache_dir() / "exports" / hashlib.sha256(base.encode()).hexdigest()[:16]
    return folder / f"{model.identity.split('|')[1] if '|' in model.identity else 'torch-fp32'}.onnx"


def ensure_export(model: ResolvedModel) -> Path:
    """The cached ONNX file for ``model``, built (once, under a lock) when missing."""
    target = export_path(model)
    if target.is_file():
        return target
    with file_lock(target.with_suffix(".lock")):
        if target.is_file():  # another process built it while this one waited
            return target
        fp32 = target.with_name("onnx-fp32.onnx")
        if not fp32.is_file():
            with atomic_path(fp32) as tmp:
                _export_fp32(model.path, tmp)
        if model.quantize:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            with atomic_path(target) as tmp:
                quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
    return target


def _export_fp32(model_dir: str, out: Path) -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    encoder = AutoModel.from_pretrained(model_dir).eval()
    sample = tokenizer(["an export sample", "two"], return_tensors="pt", padding=True)
    names = [n for n in _INPUTS if n in sample]

    class LastHidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, *tensors: Any) -> Any:
            return self.encoder(**dict(zip(names, tensors, strict=True))).last_hidden_state

    with torch.no_grad():
        torch.onnx.export(
            LastHidden(),
            tuple(sample[n] for n in names),
            str(out),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={n: {0: "batch", 1: "tokens"} for n in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,
        )


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
    raise ValueError(f"{root / pool_dir / 'config.json'}: only mean or CLS pooling run on the onnx backend")


@functools.lru_cache(maxsize=4)
def _session(onnx_file: str, model_dir: str) -> tuple[Any, Any, str]:
    import onnxruntime
    from transformers import AutoTokenizer

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(onnx_file, options, providers=["CPUExecutionProvider"])
    return session, AutoTokenizer.from_pretrained(model_dir), _pooling(model_dir)


def default_max_length(model_dir: str) -> int:
    """The model's own max_seq_length (sentence_bert_config.json), else 512."""
    try:
        return int(json.loads((Path(model_dir) / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return 512


def encode_onnx(
    model: ResolvedModel, texts: Sequence[str], *, prompt: str, max_seq_length: int | None, batch_size: int
) -> np.ndarray:
    """Normalised float32 vectors from the ONNX export; texts are batched by length, as
    sentence-transformers does, so padding stays small."""
    session, tokenizer, pooling = _session(str(ensure_export(model)), model.path)
    max_length = max_seq_length or default_max_length(model.path)
    inputs = [prompt + t for t in texts]
    order = np.argsort([-len(t) for t in inputs], kind="stable")
    out = np.zeros((len(inputs), 0), dtype=np.float32)
    wanted = {i.name for i in session.get_inputs()}
    for start in range(0, len(inputs), batch_size):
        rows = order[start : start + batch_size]
        enc = tokenizer(
            [inputs[i] for i in rows], padding=True, truncation=True, max_length=max_length, return_tensors="np"
        )
        hidden = session.run(None, {k: v.astype(np.int64) for k, v in enc.items() if k in wanted})[0]
        if pooling == "cls":
            vectors = hidden[:, 0]
        else:
            mask = enc["attention_mask"][..., None].astype(np.float32)
            vectors = (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
        if out.shape[1] == 0:
            out = np.zeros((len(inputs), vectors.shape[1]), dtype=np.float32)
        out[rows] = vectors
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.clip(norms, 1e-12, None)
