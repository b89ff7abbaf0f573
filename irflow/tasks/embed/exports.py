"""Graphs of a local model for the ONNX Runtime and OpenVINO backends, built once from the local
weights (no network) and cached under the weights' identity.

Why not sentence-transformers' ``backend="onnx"|"openvino"``: it needs optimum-onnx / optimum-intel,
which pin transformers<4.58 and cannot install beside sentence-transformers 6 (transformers 5).

Recipes, one file (or folder) each under ``cache_dir()/exports/<sha256(weights identity)[:16]>/``; the
model identity names the recipe (``models.encoder_tag``), so vectors of one recipe never serve another:

* ``plain-fp32.onnx``: ``torch.onnx.export`` of the transformer with eager attention (the pattern ONNX
  Runtime's fusions recognise): its last hidden state for a bi-encoder, the classifier's logits for a
  cross-encoder; what OpenVINO compiles for fp32/bf16/fp16.
* ``onnx-fused-fp32.onnx``: ONNX Runtime's transformer optimiser (fused attention, embedding and skip
  layer norms, bias-GELU); models it does not recognise keep the plain graph.
* ``onnx-fused-int8dyn-perchannel.onnx``: the fused graph with int8 weights per output channel and
  dynamic uint8 activations (optimum's avx512_vnni preset; per-tensor weights lose too much: cosine
  to fp32 0.92-0.96 against 0.98-0.99); ONNX Runtime picks the VNNI / AVX512 / AVX2 kernels at run time.
* ``openvino-int8static-smoothquant/``: NNCF post-training int8 of the plain graph (SmoothQuant, fast
  bias correction; transformer preset), calibrated on the first ``CALIBRATION_TEXTS`` documents of the
  bundled techdocs corpus (paired with its queries for a cross-encoder), so the same weights always give
  the same graph.

Each is published by an atomic rename under a lock: concurrent builders export once and readers
never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from irflow.tasks.core.atomic import atomic_path, file_lock, publish_dir
from irflow.tasks.core.config import cache_dir
from irflow.tasks.embed.models import ResolvedModel, is_cross_encoder

log = logging.getLogger(__name__)

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
CALIBRATION_TEXTS = 128  # techdocs documents NNCF sees; part of the recipe (it changes the graph)
OPENVINO_INT8 = "openvino-int8static-smoothquant"


def export_folder(model: ResolvedModel) -> Path:
    """The cache folder of ``model``'s weights (its identity without the backend tag)."""
    return cache_dir() / "exports" / hashlib.sha256(model.identity.split("|")[0].encode()).hexdigest()[:16]


def plain_export(model: ResolvedModel) -> Path:
    """``plain-fp32.onnx``: the transformer's last hidden state (a cross-encoder's logits), built once."""
    target = export_folder(model) / "plain-fp32.onnx"
    return _built(target, lambda tmp: _export(model.path, tmp, cross_encoder=is_cross_encoder(model)))


def onnx_export(model: ResolvedModel, *, int8: bool) -> Path:
    """The fused fp32 graph, or its int8 quantisation, built once."""
    folder = export_folder(model)
    fused = _built(folder / "onnx-fused-fp32.onnx", lambda tmp: _fuse(model.path, plain_export(model), tmp))
    if not int8:
        return fused
    return _built(folder / "onnx-fused-int8dyn-perchannel.onnx", lambda tmp: _quantize_dynamic(fused, tmp))


def openvino_int8_export(model: ResolvedModel) -> Path:
    """The NNCF int8 OpenVINO model (``model.xml`` + ``model.bin``), built once."""
    target = export_folder(model) / OPENVINO_INT8
    if (target / "model.xml").is_file():
        return target / "model.xml"
    plain = plain_export(model)
    with file_lock(target.with_name(target.name + ".lock")):
        if not (target / "model.xml").is_file():
            with publish_dir(target) as tmp:
                _quantize_openvino(model.path, plain, tmp / "model.xml", cross_encoder=is_cross_encoder(model))
    return target / "model.xml"


def _built(target: Path, build: Any) -> Path:
    """``target``, made by ``build(temporary path)`` under a lock and renamed into place when missing."""
    if target.is_file():
        return target
    with file_lock(target.with_suffix(".lock")):
        if not target.is_file():  # another process may have built it while this one waited
            log.info("building %s (once per model)", target.name)
            with atomic_path(target) as tmp:
                build(tmp)
    return target


def _export(model_dir: str, out: Path, *, cross_encoder: bool) -> None:
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    loader = AutoModelForSequenceClassification if cross_encoder else AutoModel
    network = loader.from_pretrained(model_dir, attn_implementation="eager").eval()
    sample = tokenizer(["an export sample", "two"], ["a second segment", "three"], return_tensors="pt", padding=True)
    names = [n for n in INPUTS if n in sample]
    output = "logits" if cross_encoder else "last_hidden_state"

    class Output(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = network

        def forward(self, *tensors: Any) -> Any:
            return getattr(self.network(**dict(zip(names, tensors, strict=True))), output)

    with torch.no_grad():
        torch.onnx.export(
            Output(),
            tuple(sample[n] for n in names),
            str(out),
            input_names=names,
            output_names=[output],
            dynamic_axes={**{n: {0: "batch", 1: "tokens"} for n in names}, output: {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )


def _fuse(model_dir: str, plain: Path, out: Path) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    config = json.loads((Path(model_dir) / "config.json").read_text())
    optimized = optimize_model(
        str(plain),
        model_type="bert",  # BERT, RoBERTa, XLM-R, MiniLM, BGE, E5 share the pattern; others stay unfused
        num_heads=int(config.get("num_attention_heads", 0)),
        hidden_size=int(config.get("hidden_size", 0)),
        opt_level=1,
    )
    fused = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    log.info("ONNX Runtime fusions for %s: %s", Path(model_dir).name, fused or "none (the plain graph is kept)")
    optimized.save_model_to_file(str(out))


def _quantize_dynamic(fused: Path, out: Path) -> None:
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(fused),
        str(out),
        weight_type=QuantType.QInt8,
        per_channel=True,
        extra_options={"DefaultTensorType": TensorProto.FLOAT},  # fused contrib ops carry no inferred type
    )


def calibration_texts(count: int = CALIBRATION_TEXTS) -> list[str]:
    """The first ``count`` documents of the bundled techdocs corpus (title + text): fixed, offline."""
    docs = _techdocs("corpus.jsonl")[:count]
    return [f"{d.get('title', '')} {d.get('text', '')}".strip() for d in docs]


def calibration_pairs(count: int = CALIBRATION_TEXTS) -> list[tuple[str, str]]:
    """``count`` (query, document) pairs for a cross-encoder: techdocs queries in turn beside its first documents."""
    queries = [q["text"] for q in _techdocs("queries.jsonl")]
    return [(queries[i % len(queries)], doc) for i, doc in enumerate(calibration_texts(count))]


def _techdocs(name: str) -> list[dict[str, Any]]:
    from importlib.resources import files

    lines = (files("irflow.datasets") / "techdocs" / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _quantize_openvino(model_dir: str, plain: Path, out: Path, *, cross_encoder: bool) -> None:
    import nncf
    import numpy as np
    import openvino
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    core = openvino.Core()
    network = core.read_model(str(plain))
    wanted = {i.get_any_name() for i in network.inputs}
    count = CALIBRATION_TEXTS  # read now, not when the helpers were defined
    items: list[Any] = calibration_pairs(count) if cross_encoder else calibration_texts(count)
    batches = []
    for start in range(0, len(items), 8):
        chunk = items[start : start + 8]
        segments = [list(s) for s in zip(*chunk, strict=True)] if cross_encoder else [chunk]
        enc = tokenizer(*segments, padding=True, truncation=True, max_length=256, return_tensors="np")
        batches.append({k: v.astype(np.int64) for k, v in enc.items() if k in wanted})
    quantized = nncf.quantize(
        network, nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(items)
    )
    openvino.save_model(quantized, str(out))
