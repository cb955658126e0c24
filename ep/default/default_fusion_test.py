"""L2 fusion coverage for the default EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="default", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention (encoders, vision
towers, embedders, speech seq2seq).

The portable graph: no vendor fusion at all (standard Attention stays),
and any custom op keeps its standard-op function body.
"""

from ep import fusion_suite
from testing import ep_suite as s

EP = "default"

_PORTABLE = (
    s.Absent(s.GQA),
    s.PerLayer("Attention"),
    s.CustomOpsHaveFunctions(),
    s.NoGqaWarning(),
)

EXPECTATIONS = {
    "f32": _PORTABLE,
    "f16": _PORTABLE,
    "bf16": _PORTABLE,
}

#: Encoder families (feature extraction, classifiers, fill-mask): the portable graph --
#: standard Attention per layer, no vendor fusions (this EP *is* the generic graph, so
#: nothing is compared with it).
_ENCODER = (
    s.PerLayer("Attention"),
    s.Absent(s.SKIP_LAYER_NORM, "com.microsoft::BiasGelu"),
)
ENCODER_EXPECTATIONS = {dtype: _ENCODER for dtype in EXPECTATIONS}

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule).
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS, ENCODER_EXPECTATIONS))
