"""cpu: onnxruntime's CPU EP.

QKV packing is enabled (unlike the EP table's minimum) because the CPU GQA
kernel accepts packed QKV and one [hidden, q+2kv] MatMul is faster than three.
Float32 sparse-MoE blocks fuse into com.microsoft MoE (QMoE when quantized).
"""

import onnx_ir as ir

from mobius.ep import contrib_ops
from mobius.ep.capabilities import F32_F16, EpCapabilities

CAPABILITIES = EpCapabilities(
    name="cpu",
    compute_dtypes=F32_F16,
    gqa_dtypes={ir.DataType.FLOAT},
    qkv_pack_dtypes={ir.DataType.FLOAT},
    mha_dtypes=F32_F16,
    supports_fused_rope=True,
    gqa_sliding_window_cache=True,
    # head_sink: checked against onnxruntime 1.32's CPU kernel (components/attention_sinks_test.py).
    gqa_head_sink=True,
    supports_skip_layer_norm=True,
    prepacks_2d_weights=True,
    # onnxruntime 1.32's CPU MoE kernel takes float32 only (its QMoE also f16 / bf16)
    moe_dtypes={ir.DataType.FLOAT},
    quant_tied_embedding=True,  # as onnxruntime-genai's builder does for int4
    quant_embedding=True,  # GatherBlockQuantized at the build's bits (capabilities.py)
    contrib_ops=contrib_ops.ORT_COMMON | {contrib_ops.FUSED_MATMUL,
                                          contrib_ops.GATHER_BLOCK_QUANTIZED,
                                          contrib_ops.MOE, contrib_ops.QMOE},
    default_int4_accuracy_level=4,
    ort_provider="CPUExecutionProvider",
    description="onnxruntime CPU EP",
)
