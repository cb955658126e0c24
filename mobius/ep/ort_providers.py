"""The onnxruntime session provider that runs each built-in EP's package (for GPU tests and tools).

EPs whose graphs run on onnxruntime's CPU provider here map to it; None: no onnxruntime
provider (MLX, non-ORT runtimes).
"""

from __future__ import annotations

ORT_PROVIDERS: dict[str, str | None] = {
    "default": "CPUExecutionProvider",
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "dml": "DmlExecutionProvider",
    "webgpu": "WebGpuExecutionProvider",
    "mlx": None,
    "trt-rtx": "NvTensorRTRTXExecutionProvider",
    "onnx-standard": "CPUExecutionProvider",
}


def ort_provider(ep: str) -> str | None:
    """The onnxruntime provider name of built-in EP ``ep`` (KeyError for an unknown one)."""
    return ORT_PROVIDERS[ep]
