"""L2 fusion coverage for the openvino EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="openvino", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention.

OpenVINO (onnxruntime-openvino 1.24.1, measured: mobius/ep/openvino.py): standard
ops only in float builds, none of the opset-23 ops its ONNX frontend lacks
(RMSNormalization, RotaryEmbedding, Attention), no ScatterND reduction.
"""

from ep import fusion_suite
from testing import ep_suite as s

EP = "openvino"

#: the ops OpenVINO 2025.4's ONNX frontend does not take (expanded to their ONNX bodies)
_OPSET23 = ("Attention", "RMSNormalization", "RotaryEmbedding")

_OPENVINO = (
    s.Absent(s.GQA, *_OPSET23),
    s.StandardDomainOnly(),
    s.NoGqaWarning(),
)

EXPECTATIONS = {
    "f32": _OPENVINO,
    "f16": _OPENVINO,
}

#: Encoder families: standard ops only, their Attention expanded too.
_ENCODER = (
    s.Absent(*_OPSET23),
    s.StandardDomainOnly(),
)
ENCODER_EXPECTATIONS = {dtype: _ENCODER for dtype in EXPECTATIONS}

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule).
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS, ENCODER_EXPECTATIONS))
