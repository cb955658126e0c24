"""mlx: Apple MLX runtime. Unpacked Q/K/V, KV buffers shared between past and present."""

import onnx_ir as ir

from mobius.ep import contrib_ops
from mobius.ep.capabilities import EpCapabilities

CAPABILITIES = EpCapabilities(
    name="mlx",
    tasks={"text-generation"},
    gqa_dtypes={ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16},
    supports_fused_rope=True,
    quant_form="dequantize_linear",
    contrib_ops=frozenset({contrib_ops.GQA, contrib_ops.ROTARY}),
    description="Apple MLX (unpacked Q/K/V, shared KV buffers)",
)
