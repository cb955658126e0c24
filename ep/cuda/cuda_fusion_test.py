"""L2 fusion coverage for the cuda EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="cuda", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention (encoders, vision
towers, embedders, speech seq2seq).
"""

from ep import fusion_suite
from testing import ep_suite as s

EP = "cuda"

_FUSED = (
    s.PerLayer(s.GQA),
    s.Absent("Attention"),
    s.RopeAbsorbed(),
    s.QkvPacked(True),
    s.ResidualNormsFused(),
    s.NoGqaWarning(),
)

#: f32 is not a CUDA GQA dtype: attention stays standard, norms still fuse.
_F32 = (
    s.Absent(s.GQA),
    s.PerLayer("Attention"),
    s.ResidualNormsFused(),
    s.NoGqaWarning(),
)

EXPECTATIONS = {
    "f16": _FUSED,
    "bf16": _FUSED,
    "f32": _F32,
}

#: Encoder families (feature extraction, classifiers, fill-mask, vision, CTC): every
#: Attention a MultiHeadAttention (caps.mha_dtypes), every residual Add -> LayerNorm
#: fused, every Gelu after a bias Add (the layers', a masked-LM head's) a BiasGelu.
_ENCODER = (
    s.Replaced("Attention", s.MHA),
    s.ResidualNormsFused(),
    s.BiasedFused("Gelu", "com.microsoft::BiasGelu", tanh_fused="com.microsoft::FastGelu"),
)
#: bf16 is not a cuda MultiHeadAttention dtype here: attention stays standard.
_ENCODER_BF16 = (s.PerLayer("Attention"),) + _ENCODER[1:]
ENCODER_EXPECTATIONS = {dtype: _ENCODER_BF16 if dtype == "bf16" else _ENCODER
                        for dtype in EXPECTATIONS}

#: ModernBERT rotates Q/K between the head split and Attention; MultiHeadAttention has
#: no rotary, so its attention stays standard (not a missing rule: no fused form exists).
_ROPE_IN_ENCODER = "RoPE inside encoder attention: MultiHeadAttention has no rotary"
_MODERNBERT = ("modernbert", "modernbert-seq-cls", "modernbert-tok-cls", "modernbert-mlm")

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule);
#: the gaps a family's attention traits imply on this EP come from testing/ep_suite.TRAIT_GAPS.
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}
KNOWN_GAPS.update({(family, dtype, "Attention->MultiHeadAttention"): _ROPE_IN_ENCODER
                   for family in _MODERNBERT for dtype in ("f16", "f32")})


globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS, ENCODER_EXPECTATIONS))
