"""L2 fusion coverage for the onnx-standard EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="onnx-standard", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention (encoders, vision
towers, embedders, speech seq2seq).

Standard ONNX only: zero nodes outside the ONNX domain and no local
functions (every contrib op inlined), so non-ORT runtimes can load it.
"""

from ep import fusion_suite
from testing import ep_suite as s

EP = "onnx-standard"

_STANDARD = (
    s.Absent(s.GQA),
    s.StandardDomainOnly(),
    s.PerLayer("Attention"),
    s.NoGqaWarning(),
)

EXPECTATIONS = {
    "f32": _STANDARD,
    "f16": _STANDARD,
    "bf16": _STANDARD,
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

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule).
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS, ENCODER_EXPECTATIONS))
