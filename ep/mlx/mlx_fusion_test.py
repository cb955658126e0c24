"""L2 fusion coverage for the mlx EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="mlx", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention (encoders, vision
towers, embedders, speech seq2seq).

Apple MLX: GQA with unpacked Q/K/V and fused RoPE; no Skip*LayerNormalization
(MLX has only the GQA and RotaryEmbedding contrib kernels).
"""

from ep import fusion_suite
from testing import ep_suite as s

EP = "mlx"

_MLX = (
    s.PerLayer(s.GQA),
    s.Absent("Attention"),
    s.QkvPacked(False),
    s.RopeAbsorbed(),
    s.Absent(s.SKIP_SIMPLIFIED, s.SKIP_LAYER_NORM),
    s.NoGqaWarning(),
)

EXPECTATIONS = {
    "f16": _MLX,
    "f32": _MLX,
    "bf16": _MLX,
}

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule).
#: HunYuan normalizes Q/K per head *after* RoPE: GroupQueryAttention's do_rotary would
#: rotate the normed Q/K, so RoPE stays a RotaryEmbedding ahead of the norm (not a
#: missing rule: no fused form exists).
_NORM_AFTER_ROPE = "QK norm after RoPE: RoPE cannot move into GroupQueryAttention"

#: gpt-oss's attention has per-head sinks; this EP's GroupQueryAttention takes no head_sink
#: (caps.gqa_head_sink false), so it stays standard Attention (not a missing rule).
_SINKS = "attention sinks: the EP's GQA kernel takes no head_sink"
KNOWN_GAPS: dict[tuple[str, str, str], str] = {
    ("hunyuan_v1_dense", "f16", "rope-in-gqa"): _NORM_AFTER_ROPE,
    ("hunyuan_v1_dense", "f32", "rope-in-gqa"): _NORM_AFTER_ROPE,
    ("hunyuan_v1_dense", "bf16", "rope-in-gqa"): _NORM_AFTER_ROPE,
    ("hunyuan_v1_moe", "f16", "rope-in-gqa"): _NORM_AFTER_ROPE,
    ("hunyuan_v1_moe", "f32", "rope-in-gqa"): _NORM_AFTER_ROPE,
    ("hunyuan_v1_moe", "bf16", "rope-in-gqa"): _NORM_AFTER_ROPE,
    ("gpt_oss", "f16", "1xGroupQueryAttention/layer"): _SINKS,
    ("gpt_oss", "f16", "no-Attention"): _SINKS,
    ("gpt_oss", "f16", "rope-in-gqa"): _SINKS,
    ("gpt_oss", "f32", "1xGroupQueryAttention/layer"): _SINKS,
    ("gpt_oss", "f32", "no-Attention"): _SINKS,
    ("gpt_oss", "f32", "rope-in-gqa"): _SINKS,
    ("gpt_oss", "bf16", "1xGroupQueryAttention/layer"): _SINKS,
    ("gpt_oss", "bf16", "no-Attention"): _SINKS,
    ("gpt_oss", "bf16", "rope-in-gqa"): _SINKS,
    ("granite_swa", "f16", "1xGroupQueryAttention/layer"): _SINKS,
    ("granite_swa", "f16", "no-Attention"): _SINKS,
    ("granite_swa", "f16", "rope-in-gqa"): _SINKS,
    ("granite_swa", "f32", "1xGroupQueryAttention/layer"): _SINKS,
    ("granite_swa", "f32", "no-Attention"): _SINKS,
    ("granite_swa", "f32", "rope-in-gqa"): _SINKS,
    ("granite_swa", "bf16", "1xGroupQueryAttention/layer"): _SINKS,
    ("granite_swa", "bf16", "no-Attention"): _SINKS,
    ("granite_swa", "bf16", "rope-in-gqa"): _SINKS,
    ("granitemoe_swa", "f16", "1xGroupQueryAttention/layer"): _SINKS,
    ("granitemoe_swa", "f16", "no-Attention"): _SINKS,
    ("granitemoe_swa", "f16", "rope-in-gqa"): _SINKS,
    ("granitemoe_swa", "f32", "1xGroupQueryAttention/layer"): _SINKS,
    ("granitemoe_swa", "f32", "no-Attention"): _SINKS,
    ("granitemoe_swa", "f32", "rope-in-gqa"): _SINKS,
    ("granitemoe_swa", "bf16", "1xGroupQueryAttention/layer"): _SINKS,
    ("granitemoe_swa", "bf16", "no-Attention"): _SINKS,
    ("granitemoe_swa", "bf16", "rope-in-gqa"): _SINKS,
}


globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS))
