"""L2 fusion coverage for the qnn EP: the expectation table below, per build dtype.

Every family's tiny transformers checkpoint is built with
``mobius.build(..., execution_provider="qnn", dtype=...)`` and each check
(testing/ep_suite.py) must hold for the causal-LM decoder; in every family,
no model but that decoder may get GroupQueryAttention.

QNN's HTP (onnxruntime-qnn 2.7.0, measured: mobius/ep/qnn.py): standard ops only
(it has no kernel for mobius's com.microsoft ops), and the decoder's graph I/O
static (it compiles one shape; StaticShapes). The EP serves text generation only
(mobius/ep/qnn.py), so no encoder family is in its suite.
"""

from ep import fusion_suite
from testing import ep_suite as s

EP = "qnn"

_QNN = (
    s.Absent(s.GQA),
    s.StandardDomainOnly(),
    s.NoGqaWarning(),
    s.StaticIO(),
)

EXPECTATIONS = {
    "f32": _QNN,
    "f16": _QNN,
}

#: (family, dtype, check) -> why it cannot hold yet (strict xfail: names the missing rule).
KNOWN_GAPS: dict[tuple[str, str, str], str] = {}


globals().update(fusion_suite.tests_for(EP, EXPECTATIONS, KNOWN_GAPS))
