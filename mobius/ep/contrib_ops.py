"""Names of the com.microsoft ops mobius emits or fuses (kernel sets per EP use these)."""

GQA = "GroupQueryAttention"
SKIP_SIMPLIFIED_LAYER_NORM = "SkipSimplifiedLayerNormalization"
SKIP_LAYER_NORM = "SkipLayerNormalization"
ROTARY = "RotaryEmbedding"
BIAS_GELU = "BiasGelu"
FAST_GELU = "FastGelu"
MATMUL_NBITS = "MatMulNBits"
MOE = "MoE"
QMOE = "QMoE"
GATHER_BLOCK_QUANTIZED = "GatherBlockQuantized"
PACKED_MHA = "PackedMultiHeadAttention"
FUSED_MATMUL = "FusedMatMul"
MHA = "MultiHeadAttention"
QUICK_GELU = "QuickGelu"

#: what onnxruntime's CPU, CUDA, DirectML and WebGPU EPs all register (checked against
#: their contrib kernel registries: MultiHeadAttention and QuickGelu included).
ORT_COMMON = frozenset({GQA, SKIP_SIMPLIFIED_LAYER_NORM, SKIP_LAYER_NORM, ROTARY, BIAS_GELU,
                        FAST_GELU, MATMUL_NBITS, MHA, QUICK_GELU})
