"""L2 fusion coverage for the dml EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="dml", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention (encoders, vision
towers, embedders, speech seq2seq).

DirectML: GQA without fused RoPE (separate RotaryEmbedding, ``do_rotary=0``),
no packed QKV, no If.
"""

import pytest

from testing import ep_suite as s
from testing.ep_suite import builds  # noqa: F401  (module-scoped fixture)

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

#: Encoder families (feature extraction, classifiers, fill-mask): standard Attention per
#: layer (no encoder attention fusion rule yet), every residual Add -> LayerNorm fused,
#: every Gelu after a bias Add (the layers', a masked-LM head's) a BiasGelu.
_ENCODER = (
    s.PerLayer("Attention"),
    s.ResidualNormsFused(),
    s.BiasedFused("Gelu", "com.microsoft::BiasGelu"),
)
ENCODER_EXPECTATIONS = {dtype: _ENCODER for dtype in EXPECTATIONS}

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule).
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


@pytest.mark.parametrize("family,dtype,check", s.fusion_params(EP, EXPECTATIONS, KNOWN_GAPS,
                                                                    ENCODER_EXPECTATIONS))
def test_expectation(builds, family, dtype, check):  # noqa: F811
    s.assert_check(builds, EP, family, dtype, check)


def test_table_covers_the_ep_dtypes():
    assert set(EXPECTATIONS) == set(s.EP_DTYPES[EP]) == s.expected_dtypes(EP)
