"""Encoder options of dense and rerank specs: parsing, validation, identity separation, clear errors."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.embed import backends, exports
from irflow.tasks.embed.inference import encode, score_pairs_many
from irflow.tasks.embed.models import BackendUnavailableError, resolve_model, with_encoder
from irflow.tasks.experiment import check_models
from irflow.tasks.systems.specs import parse_system


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
        ("dense(precision=fp16):minilm", InputError, "device=cuda or device=mps"),
        ("dense(device=cpu,precision=bf16):minilm", InputError, "device=cuda or device=mps"),
        ("dense(backend=onnx,precision=bf16):minilm", InputError, "backend=openvino"),
        ("dense(backend=openvino,quantize=int8,precision=bf16):minilm", InputError, "keeps its other layers in fp32"),
        ("dense(backend=openvino,device=cuda):minilm", InputError, "runs on the CPU"),
        ("rerank(backend=onnx,device=cuda,precision=fp16):minilm@bm25", InputError, "runs on the CPU"),
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
            "dense(backend=openvino):minilm",
            "dense(backend=openvino,precision=bf16):minilm",
            "dense(device=cuda,precision=fp16):minilm",
        )
    }
    assert len(identities) == 7
    # fp32 torch keeps the identity existing embedding caches were written under; the device does not change it
    assert with_encoder(model, parse_system("dense(device=cpu):minilm")).identity == model.identity


def test_unavailable_backends_fail_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    # every backend module installed but nncf, whichever extras this environment has
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nncf" else object())
    # before any stage runs: the missing module and the extra that brings it
    with pytest.raises(BackendUnavailableError, match=r"needs the Python module 'nncf'.*irflow\[openvino\]"):
        check_models(["hybrid:bm25+dense(backend=openvino,quantize=int8):minilm"])
    check_models(["rerank(backend=openvino):minilm@bm25"])  # a bi-encoder rerank runs on the exported graph


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the ONNX tests of this module: the export is built by the first and reused after."""
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="needs irflow[fast] (onnx, onnxruntime)")
def test_onnx_int8_export_is_built_once_and_close_to_torch(onnx_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(onnx_cache))
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
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.mean() > 0.985 and cosines.min() > 0.97, cosines
    onnx_fp32 = with_encoder(model, parse_system("dense(backend=onnx):minilm"))
    fp32 = encode(onnx_fp32, texts, prompt="", max_seq_length=None)
    np.testing.assert_allclose(fp32, reference, atol=1e-4)  # the fused graph computes what torch does
    built = exports.onnx_export(int8, int8=True)
    assert built.parent.parent == onnx_cache / "exports"
    assert sorted(p.name for p in built.parent.glob("*.onnx")) == [
        "onnx-fused-fp32.onnx",
        "onnx-fused-int8dyn-perchannel.onnx",
        "plain-fp32.onnx",
    ]

    def no_export(*args: object) -> None:
        raise AssertionError("the export was rebuilt")

    monkeypatch.setattr(exports, "_export", no_export)
    monkeypatch.setattr(exports, "_fuse", no_export)
    monkeypatch.setattr(backends, "_onnx_runner", backends._onnx_runner.__wrapped__)  # a fresh load, not the memo
    mtime = built.stat().st_mtime_ns
    again = encode(int8, texts, prompt="", max_seq_length=None)
    assert built.stat().st_mtime_ns == mtime
    np.testing.assert_allclose(again, vectors, atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("nncf") is None, reason="needs irflow[openvino] (openvino, nncf)")
def test_openvino_runs_fp32_bf16_and_int8_close_to_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import openvino

    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(exports, "CALIBRATION_TEXTS", 16)  # the recipe's code path, calibrated on fewer texts
    model = resolve_model("minilm")
    texts = [
        "Aspirin reduces the risk of myocardial infarction in patients with prior stroke.",
        "protein folding in yeast cells under heat stress",
        "",
    ]
    reference = encode(model, texts, prompt="query: ", max_seq_length=None)

    def cosines(spec: str) -> np.ndarray:
        vectors = encode(with_encoder(model, parse_system(spec)), texts, prompt="query: ", max_seq_length=None)
        assert vectors.shape == reference.shape and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
        return (vectors * reference).sum(axis=1)

    assert cosines("dense(backend=openvino):minilm").min() > 0.9999  # fp32 asked for, not OpenVINO's bf16 default
    assert cosines("dense(backend=openvino,quantize=int8):minilm").min() > 0.97
    assert (tmp_path / "exports").glob("*/openvino-int8static-smoothquant/model.xml")
    if "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        bf16 = cosines("dense(backend=openvino,precision=bf16):minilm")
        assert 0.999 < bf16.min() and bf16.max() < 1 - 1e-7  # close, and really computed in bf16
    with pytest.raises(BackendUnavailableError, match="needs a CPU with FP16 units"):
        backends.check_openvino_precision("fp16", ["FP32", "BF16", "INT8"])


@pytest.mark.skipif(importlib.util.find_spec("nncf") is None, reason="needs irflow[fast,openvino]")
def test_a_cross_encoder_scores_on_onnx_and_openvino_as_on_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A one-logit *ForSequenceClassification model (MiniLM body, seeded head: no cross-encoder with weights is
    installable offline) gives CrossEncoder.predict's scores on the fp32 graphs and nearly its order in int8."""
    import onnx
    import torch
    from scipy.stats import spearmanr
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(exports, "CALIBRATION_TEXTS", 16)
    minilm = resolve_model("minilm")
    path = str(tmp_path / "cross-encoder")
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_pretrained(minilm.path, num_labels=1).save_pretrained(path)
    AutoTokenizer.from_pretrained(minilm.path).save_pretrained(path)
    docs = exports.calibration_texts(40)
    items = [("how do retries work in the go client", docs[:25]), ("why is filtered search slow", docs[25:]), ("", [])]
    reference = np.concatenate(score_pairs_many(path, items))  # CrossEncoder.predict: sigmoid of the logit

    def scores(options: str) -> np.ndarray:
        per_query = score_pairs_many(path, items, encoder=parse_system(f"rerank({options}):x@bm25"))
        assert [len(s) for s in per_query] == [25, 15, 0]
        return np.concatenate(per_query)

    np.testing.assert_allclose(scores("backend=onnx"), reference, atol=1e-6)
    np.testing.assert_allclose(scores("backend=openvino"), reference, atol=1e-6)
    for options in ("backend=onnx,quantize=int8", "backend=openvino,quantize=int8"):
        int8 = scores(options)
        assert 0 < np.abs(int8 - reference).max() < 0.01 and spearmanr(int8, reference)[0] > 0.9, options
    plain = exports.plain_export(with_encoder(resolve_model(path), parse_system("rerank(backend=onnx):x@bm25")))
    assert [o.name for o in onnx.load(str(plain)).graph.output] == ["logits"]
    assert plain.parent != exports.export_folder(minilm)  # its own weights, its own graphs


def test_a_cross_encoder_the_exported_backends_cannot_score_is_named(tmp_path: Path) -> None:
    """Two logits, or an activation other than sigmoid/identity, are refused with the file; the defaults work."""
    import json

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"id2label": {"0": "no", "1": "yes"}}))
    with pytest.raises(ValueError, match=r"config\.json: only one-logit cross-encoders"):
        backends._activation(str(tmp_path))
    config.write_text(json.dumps({"id2label": {"0": "LABEL_0"}}))
    assert backends._activation(str(tmp_path))(np.array([0.0]))[0] == 0.5  # sigmoid when nothing is named
    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps({"activation_fn": "torch.nn.Tanh"}))
    with pytest.raises(ValueError, match="'torch.nn.Tanh' does not run on the onnx/openvino backends"):
        backends._activation(str(tmp_path))
    (tmp_path / "config_sentence_transformers.json").write_text(json.dumps({"activation_fn": "torch.nn.Identity"}))
    assert backends._activation(str(tmp_path))(np.array([2.5]))[0] == 2.5


@pytest.mark.skipif(importlib.util.find_spec("onnx") is None, reason="needs irflow[fast] (onnx, onnxruntime)")
def test_the_report_says_what_int8_costs_beside_torch_fp32(
    onnx_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Speed and quality side by side in one evaluation (the library call ``irflow run`` makes; the export of the
    first test is reused): the report's backend table gives the encode-rate ratio and the nDCG@10 difference
    that metrics.json's numbers imply."""
    import json

    import irflow

    int8 = "dense(backend=onnx,quantize=int8):sentence-transformers/all-MiniLM-L6-v2"
    torch = "dense:sentence-transformers/all-MiniLM-L6-v2"
    monkeypatch.setenv("IRFLOW_CACHE_DIR", str(onnx_cache))
    systems = ["dense:minilm", "dense(backend=onnx,quantize=int8):minilm"]
    irflow.evaluate("techdocs", systems, metrics=["nDCG@10"], latency_runs=0, output=tmp_path / "out")
    document = json.loads((tmp_path / "out" / "metrics.json").read_text())
    delta = document["systems"][int8]["nDCG@10"] - document["systems"][torch]["nDCG@10"]
    assert abs(delta) <= 0.02  # techdocs, 80 queries: int8 stays close to fp32
    rates = {s: document["cost"][s]["documents_per_second"] for s in (int8, torch)}
    report = (tmp_path / "out" / "report.md").read_text()
    section = report.split("### Encoding backends", 1)[1].split("\n#", 1)[0]
    row = next(line for line in section.splitlines() if line.startswith("|") and "int8" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == f"{rates[int8] / rates[torch]:.2f}×"
    assert cells[6] == f"{delta:+.4f}"
