"""cuda: onnxruntime's CUDA EP."""

import onnx_ir as ir

from mobius.ep import contrib_ops
from mobius.ep.capabilities import F32_F16, FLOAT_DTYPES, EpCapabilities

_HALF = {ir.DataType.FLOAT16, ir.DataType.BFLOAT16}

CAPABILITIES = EpCapabilities(
    name="cuda",
    gqa_dtypes=_HALF,
    qkv_pack_dtypes=_HALF,
    mha_dtypes=F32_F16,
    supports_fused_rope=True,
    # head_sink: onnxruntime's CUDA GQA kernels take it since gpt-oss support (not run here).
    gqa_head_sink=True,
    supports_skip_layer_norm=True,
    moe_dtypes=FLOAT_DTYPES,
    quant_tied_embedding=True,  # as onnxruntime-genai's builder does for int4
    quant_embedding=True,  # GatherBlockQuantized at the build's bits (capabilities.py)
    contrib_ops=contrib_ops.ORT_COMMON | {contrib_ops.MOE, contrib_ops.QMOE, contrib_ops.PACKED_MHA,
                                              contrib_ops.GATHER_BLOCK_QUANTIZED},
    provider_options={"cuda": {}},
    graph_capture_option="enable_cuda_graph",
    ort_provider="CUDAExecutionProvider",
    description="onnxruntime CUDA EP",
)
