"""L2 fusion coverage for the dml EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="dml", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention (encoders, vision
towers, embedders, speech seq2seq).

DirectML: GQA without fused RoPE (separate RotaryEmbedding, ``do_rotary=0``),
no packed QKV, no If.
"""

from ep import fusion_suite
from testing import ep_suite as s

EP = "dml"

EXPECTATIONS = {
    "f16": (
        s.PerLayer(s.GQA),
        s.Absent("Attention"),
        s.Absent("If"),
        s.QkvPacked(False),
        s.GqaAttribute("do_rotary", 0),
        s.SameCountAsGeneric(s.ROTARY_OPS, "RotaryEmbedding"),
        s.ResidualNormsFused(),
        s.NoGqaWarning(),
    ),
    # f32 is not a DML GQA dtype: attention stays standard, the graph rules hold.
    "f32": (
        s.Absent(s.GQA),
        s.PerLayer("Attention"),
        s.Absent("If"),
        s.ResidualNormsFused(),
        s.NoGqaWarning(),
    ),
}

#: Encoder families (feature extraction, classifiers, fill-mask, vision, CTC): every
#: Attention a MultiHeadAttention (caps.mha_dtypes), every residual Add -> LayerNorm
#: fused, every Gelu after a bias Add (the layers', a masked-LM head's) a BiasGelu.
_ENCODER = (
    s.Replaced("Attention", s.MHA),
    s.ResidualNormsFused(),
    s.BiasedFused("Gelu", "com.microsoft::BiasGelu", tanh_fused="com.microsoft::FastGelu"),
)
ENCODER_EXPECTATIONS = {dtype: _ENCODER for dtype in EXPECTATIONS}

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
