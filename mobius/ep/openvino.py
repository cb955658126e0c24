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


def _precision_options(dtype: ir.DataType, quantized: bool) -> dict[str, str]:
    """OpenVINO's CPU plugin computes in bf16 on CPUs with bf16 units unless told
    otherwise, and quantizes the activations of MatMulNBits to int8: pin both.

    f16 builds ask for f32 too: on a CPU with avx512_bf16 but no native f16 (AMD Zen 4)
    the plugin honours an ``f16`` hint by computing in bf16 (tiny Llama's logits 9e-3
    from float32, 9x the CPU EP's f16 error; measured), while ``f32`` computes the f16
    package's weights and inputs at least as exactly as f16 on every CPU. The package's
    inputs and outputs stay f16; only CPUs with native f16 units lose speed."""
    del dtype  # every build dtype computes in f32 (see above)
    cpu = {"INFERENCE_PRECISION_HINT": "f32"}
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
