"""L2 fusion coverage for the trt-rtx EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="trt-rtx", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention (encoders, vision
towers, embedders, speech seq2seq).

TensorRT-RTX: GQA, but zero Skip*LayerNormalization (TensorRT fuses the
residual Add + norm itself; the contrib op is inlined to standard ops).
"""

from ep import fusion_suite
from testing import ep_suite as s

EP = "trt-rtx"

_TRT_RTX = (
    s.PerLayer(s.GQA),
    s.Absent("Attention"),
    s.RopeAbsorbed(),
    s.QkvPacked(True),
    s.Absent(s.SKIP_SIMPLIFIED, s.SKIP_LAYER_NORM),
    s.NoGqaWarning(),
)

#: f32 is not a TensorRT-RTX GQA dtype: attention stays standard.
_F32 = (
    s.Absent(s.GQA),
    s.PerLayer("Attention"),
    s.Absent(s.SKIP_SIMPLIFIED, s.SKIP_LAYER_NORM),
    s.NoGqaWarning(),
)

EXPECTATIONS = {
    "f16": _TRT_RTX,
    "bf16": _TRT_RTX,
    "f32": _F32,
}

#: Encoder families (feature extraction, classifiers, fill-mask): standard ops only --
#: Attention per layer, every Gelu kept, LayerNormalization unfused (the EP decomposes
#: Skip*LayerNorm / BiasGelu).
_ENCODER = (
    s.PerLayer("Attention"),
    s.SameCountAsGeneric(("Gelu",), "Gelu"),
    s.Absent(s.SKIP_LAYER_NORM, "com.microsoft::BiasGelu"),
)
ENCODER_EXPECTATIONS = {dtype: _ENCODER for dtype in EXPECTATIONS}

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule);
#: the gaps a family's attention traits imply on this EP come from testing/ep_suite.TRAIT_GAPS.
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS, ENCODER_EXPECTATIONS))
