"""webgpu: no Shape ops, no int64 graph I/O, no If; concrete dims."""

import onnx_ir as ir

from mobius.ep import contrib_ops
from mobius.ep.capabilities import F32_F16, EpCapabilities

CAPABILITIES = EpCapabilities(
    name="webgpu",
    dtypes=F32_F16,
    compute_dtypes=F32_F16,
    gqa_dtypes={ir.DataType.FLOAT, ir.DataType.FLOAT16},
    qkv_pack_dtypes={ir.DataType.FLOAT, ir.DataType.FLOAT16},
    mha_dtypes=F32_F16,
    supports_fused_rope=True,
    # head_sink: onnxruntime's WebGPU GQA takes it (microsoft/onnxruntime#25285; not run here).
    gqa_head_sink=True,
    supports_skip_layer_norm=True,
    supports_if=False,
    supports_shape=False,
    supports_int64=False,
    # And [4, 7] with [1, 1, 4, 7] fails in onnxruntime-webgpu 1.27 (the window mask)
    supports_rank_broadcast=False,
    use_concrete_dims=True,
    default_int4_accuracy_level=4,
    quant_tied_embedding=True,  # as onnxruntime-genai's builder does for int4
    quant_embedding=True,  # GatherBlockQuantized at the build's bits (capabilities.py)
    contrib_ops=contrib_ops.ORT_COMMON | {contrib_ops.GATHER_BLOCK_QUANTIZED},
    provider_options={"webgpu": {}},
    graph_capture_option="enableGraphCapture",
    ort_provider="WebGpuExecutionProvider",
    description="WebGPU EP (browsers via onnxruntime-web, native via Dawn)",
)
