"""Encoder options of dense and rerank specs: parsing, validation, identity separation, clear errors."""

from __future__ import annotations

import importlib.util

import pytest

from irflow.tasks.models import BackendUnavailableError, load_sentence_transformer, resolve_model, with_encoder
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


@pytest.mark.skipif(importlib.util.find_spec("optimum") is not None, reason="optimum installed: backend available")
def test_missing_backend_fails_with_the_fix() -> None:
    with pytest.raises(BackendUnavailableError, match="pip install 'sentence-transformers\\[onnx\\]'"):
        load_sentence_transformer(resolve_model("minilm").path, "onnx")
