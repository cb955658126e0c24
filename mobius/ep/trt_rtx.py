"""trt-rtx: TensorRT for RTX. Skip*LayerNormalization are inlined; graph capture on."""

import onnx_ir as ir

from mobius.ep import contrib_ops
from mobius.ep.capabilities import EpCapabilities

CAPABILITIES = EpCapabilities(
    name="trt-rtx",
    gqa_dtypes={ir.DataType.FLOAT16, ir.DataType.BFLOAT16},
    qkv_pack_dtypes={ir.DataType.FLOAT16, ir.DataType.BFLOAT16},
    supports_fused_rope=True,
    supports_skip_layer_norm=False,
    contrib_ops=frozenset({contrib_ops.GQA, contrib_ops.MATMUL_NBITS, contrib_ops.ROTARY}),
    provider_options={"NvTensorRtRtx": {"enable_cuda_graph": "1"}},
    graph_capture_option="enable_cuda_graph",
    enable_graph_capture=True,
    quant_bits={4},
    quant_block_sizes={128},
    default_quant_block_size=128,
    quant_zero_points=False,
    ort_provider="NvTensorRTRTXExecutionProvider",
    description="NVIDIA TensorRT-RTX EP",
)
