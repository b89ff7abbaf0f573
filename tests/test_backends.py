"""Encoder options of dense and rerank specs: parsing, validation, identity separation, clear errors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from irflow.tasks import backends
from irflow.tasks.models import BackendUnavailableError, encode, load_sentence_transformer, resolve_model, with_encoder
from irflow.tasks.schema import InputError, UnknownNameError
from irflow.tasks.systems import parse_system


@pytest.mark.parametrize(
    "text",
    [
        "dense(backend=onnx,quantize=int8):minilm",
        "dense(backend=openvino,index=hnsw,M=16):minilm",
        "dense(device=cuda,precision=bf16):minilm",
        "rerank(top=20,backend=onnx,quantize=int8):minilm@bm25",
        "rerank(device=mps,precision=fp16):minilm@dense(backend=onnx):minilm",
    ],
)
def test_encoder_options_round_trip(text: str) -> None:
    spec = parse_system(text)
    assert parse_system(str(spec)) == spec
    assert str(spec) != str(parse_system(text.split("(")[0] + ":" + text.split(":", 1)[1]))


def test_defaults_are_omitted_from_the_canonical_name() -> None:
    assert str(parse_system("dense(backend=torch,precision=fp32):minilm")) == str(parse_system("dense:minilm"))


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        ("dense(backend=tensorrt):minilm", UnknownNameError, "valid: torch, onnx, openvino"),
        ("dense(backend=onnx,quantize=int4):minilm", UnknownNameError, "valid: int8"),
        ("dense(device=tpu):minilm", UnknownNameError, "valid: cpu, cuda, mps"),
        ("dense(device=cuda,precision=fp8):minilm", UnknownNameError, "valid: fp32, fp16, bf16"),
        ("dense(quantize=int8):minilm", InputError, "needs backend=onnx or backend=openvino"),
        ("dense(precision=fp16):minilm", InputError, "give device=cuda or device=mps"),
        ("dense(device=cpu,precision=bf16):minilm", InputError, "give device=cuda or device=mps"),
        ("rerank(backend=onnx,device=cuda,precision=fp16):minilm@bm25", InputError, "backend=torch"),
        ("dense(backend=onnx):openai:text-embedding-3-small", InputError, "not to an API model"),
    ],
)
def test_bad_encoder_options_name_the_allowed_values(text: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        parse_system(text)


def test_identity_separates_backend_quantization_and_precision() -> None:
    model = resolve_model("minilm")
    identities = {
        with_encoder(model, parse_system(text)).identity
        for text in (
            "dense:minilm",
            "dense(backend=onnx):minilm",
            "dense(backend=onnx,quantize=int8):minilm",
            "dense(backend=openvino,quantize=int8):minilm",
            "dense(device=cuda,precision=fp16):minilm",
        )
    }
    assert len(identities) == 5
    # fp32 torch keeps the identity existing embedding caches were written under; the device does not change it
    assert with_encoder(model, parse_system("dense(device=cpu):minilm")).identity == model.identity


def test_unavailable_backends_fail_with_the_reason() -> None:
    with pytest.raises(BackendUnavailableError, match="transformers<4.58"):
        load_sentence_transformer(resolve_model("minilm").path, "openvino")


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="needs irflow[fast] (onnx, onnxruntime)")
def test_onnx_int8_export_is_built_once_and_close_to_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(tmp_path))
    model = resolve_model("minilm")
    int8 = with_encoder(model, parse_system("dense(backend=onnx,quantize=int8):minilm"))
    texts = [
        "Aspirin reduces the risk of myocardial infarction in patients with prior stroke.",
        "protein folding in yeast cells under heat stress",
        "the cat sat on the mat",
        "x",
    ]
    reference = encode(model, texts, prompt="", max_seq_length=None)
    vectors = encode(int8, texts, prompt="", max_seq_length=None)
    assert vectors.shape == reference.shape
    assert (vectors * reference).sum(axis=1).min() > 0.98
    built = backends.export_path(int8)
    assert built.is_file() and built.parent.parent == tmp_path / "exports"
    assert sorted(p.name for p in built.parent.glob("*.onnx")) == ["onnx-fp32.onnx", "onnx-int8dyn-perchannel.onnx"]

    def no_export(*args: object) -> None:
        raise AssertionError("the export was rebuilt")

    monkeypatch.setattr(backends, "_export_fp32", no_export)
    monkeypatch.setattr(backends, "_session", backends._session.__wrapped__)  # a fresh load, not the memo
    mtime = built.stat().st_mtime_ns
    again = encode(int8, texts, prompt="", max_seq_length=None)
    assert built.stat().st_mtime_ns == mtime
    np.testing.assert_allclose(again, vectors, atol=1e-6)
