"""How a local model runs, for dense and rerank specs: inference backend, int8 quantisation, device and precision.

The options (``dense(backend=onnx,quantize=int8):minilm``, ``rerank(device=cuda,precision=fp16):...``) and the
one check of their combinations, shared by :class:`~irflow.tasks.systems.specs.DenseSpec` and
:class:`~irflow.tasks.systems.specs.RerankSpec`; what each combination runs on is in ``tasks.embed.backends``.
"""

from __future__ import annotations

from typing import Protocol

from irflow.tasks.systems.grammar import check_choice, spec_error

ENCODER_OPTIONS = ("backend", "quantize", "device", "precision")
ENCODER_BACKENDS = ("torch", "onnx", "openvino")
QUANTIZATIONS = ("int8",)
DEVICES = ("cpu", "cuda", "mps")
PRECISIONS = ("fp32", "fp16", "bf16")


class EncoderSettings(Protocol):
    """The encoder fields of a dense or rerank spec (frozen: read-only here)."""

    @property
    def backend(self) -> str: ...
    @property
    def quantize(self) -> str | None: ...
    @property
    def device(self) -> str | None: ...
    @property
    def precision(self) -> str: ...


def check_encoder(spec: EncoderSettings) -> None:
    """Validate the encoder options shared by dense and rerank specs (``ENCODER_OPTIONS``)."""
    check_choice("backend", spec.backend, ENCODER_BACKENDS)
    if spec.quantize is not None:
        check_choice("quantize", spec.quantize, QUANTIZATIONS)
        if spec.backend == "torch":
            raise spec_error("quantize=int8 needs backend=onnx or backend=openvino (torch runs fp32/fp16/bf16)")
    if spec.device is not None:
        check_choice("device", spec.device, DEVICES)
    check_choice("precision", spec.precision, PRECISIONS)
    if spec.backend != "torch" and spec.device not in (None, "cpu"):
        raise spec_error(f"backend={spec.backend} runs on the CPU: give device=cpu, or backend=torch for {spec.device}")
    if spec.quantize is not None and spec.precision != "fp32":
        raise spec_error(f"quantize={spec.quantize} keeps its other layers in fp32: drop precision={spec.precision}")
    if spec.precision == "fp32" or spec.backend == "openvino":  # OpenVINO runs bf16/fp16 on CPUs with those units
        return
    if spec.backend != "torch" or spec.device not in ("cuda", "mps"):
        raise spec_error(
            f"precision={spec.precision} runs on a GPU with the torch backend (device=cuda or device=mps) or on "
            f"the CPU with backend=openvino (got backend={spec.backend}, device={spec.device or 'default'})"
        )
