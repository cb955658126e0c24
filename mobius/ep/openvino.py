"""openvino: onnxruntime's OpenVINO EP on OpenVINO's CPU device.

Measured on onnxruntime-openvino 1.24.1 (OpenVINO 2025.4.1) on this x86-64
CPU (testing/openvino_backend.py; docs/eps.md, "OpenVINO"): its ONNX frontend
has no opset-23 RMSNormalization, RotaryEmbedding or Attention (Attention fails
session creation, the others go to the CPU EP), so they are expanded to their
ONNX function bodies, which it takes whole; its ScatterND takes no reduction
(the MoE combine fails session creation), so the unique-index scatter-add
becomes a plain ScatterND; its Pad reads pads for every axis (no ``axes``
input: the SSD scan of granitemoehybrid failed), so they are spelled out. Of the com.microsoft ops mobius
emits it runs MatMulNBits (int4 and int8 weights, activations kept in float by
DYNAMIC_QUANTIZATION_GROUP_SIZE=0); GroupQueryAttention and
SkipSimplifiedLayerNormalization stay standard ops for it.
"""

import json

import onnx_ir as ir

from mobius.ep import contrib_ops
from mobius.ep.capabilities import F32_F16, EpCapabilities

#: OpenVINO's names for the inference precisions of the build dtypes.
_PRECISION = {ir.DataType.FLOAT: "f32", ir.DataType.FLOAT16: "f16"}


def _precision_options(dtype: ir.DataType, quantized: bool) -> dict[str, str]:
    """OpenVINO's CPU plugin picks bf16 on AMX CPUs and quantizes the activations of
    MatMulNBits to int8 unless told otherwise: pin both to what the build computes."""
    cpu = {"INFERENCE_PRECISION_HINT": _PRECISION[dtype]}
    if quantized:
        cpu["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = "0"
    return {"load_config": json.dumps({"CPU": cpu}, sort_keys=True)}


CAPABILITIES = EpCapabilities(
    name="openvino",
    dtypes=F32_F16,
    compute_dtypes=F32_F16,
    contrib_ops={contrib_ops.MATMUL_NBITS},
    supports_pad_axes=False,
    supports_scatter_reduction=False,
    expand_standard_ops={"RMSNormalization", "RotaryEmbedding", "Attention"},
    precision_options=_precision_options,
    provider_options={"OpenVINO": {"device_type": "CPU"}},
    ort_provider="OpenVINOExecutionProvider",
    description="OpenVINO EP (onnxruntime-openvino), CPU device",
)
