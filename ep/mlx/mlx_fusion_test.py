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

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule);
#: the gaps a family's attention traits imply on this EP come from testing/ep_suite.TRAIT_GAPS.
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS))
