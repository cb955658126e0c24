"""dml: DirectML. No fused RoPE inside GQA, no packed QKV, no If."""

import onnx_ir as ir

from mobius.ep import contrib_ops
from mobius.ep.capabilities import F32_F16, EpCapabilities

CAPABILITIES = EpCapabilities(
    name="dml",
    dtypes=F32_F16,
    compute_dtypes=F32_F16,
    gqa_dtypes={ir.DataType.FLOAT16},
    mha_dtypes=F32_F16,
    supports_fused_rope=False,
    supports_skip_layer_norm=True,
    supports_if=False,
    contrib_ops=contrib_ops.ORT_COMMON,
    provider_options={"dml": {}},
    graph_capture_option="enable_graph_capture",
    graph_capture_by_default=True,  # genai captures unless told "0"
    ort_provider="DmlExecutionProvider",
    description="DirectML EP (Windows)",
)
