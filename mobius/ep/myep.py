"""myep: an onnxruntime EP whose kernels are the CPU EP's (a template: say here why each
capability below holds for your runtime)."""

import onnx_ir as ir

from mobius.ep import contrib_ops
from mobius.ep.capabilities import F32_F16, EpCapabilities

CAPABILITIES = EpCapabilities(
    name="myep",
    compute_dtypes=F32_F16,
    gqa_dtypes={ir.DataType.FLOAT},
    qkv_pack_dtypes={ir.DataType.FLOAT},
    mha_dtypes=F32_F16,
    supports_fused_rope=True,
    gqa_sliding_window_cache=True,
    gqa_head_sink=True,
    supports_skip_layer_norm=True,
    prepacks_2d_weights=True,
    moe_dtypes={ir.DataType.FLOAT},
    quant_tied_embedding=True,
    quant_embedding=True,
    contrib_ops=contrib_ops.ORT_COMMON | {contrib_ops.FUSED_MATMUL,
                                          contrib_ops.GATHER_BLOCK_QUANTIZED,
                                          contrib_ops.MOE, contrib_ops.QMOE},
    default_int4_accuracy_level=4,
    ort_provider="CPUExecutionProvider",
    description="a template EP (the CPU EP's capabilities)",
)
