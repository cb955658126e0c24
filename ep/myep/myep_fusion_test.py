"""L2 fusion coverage for the myep EP: the expectation table below, per build dtype."""

from ep import fusion_suite
from testing import ep_suite as s

EP = "myep"

EXPECTATIONS = {
    "f32": (
        s.PerLayer(s.GQA),
        s.Absent("Attention"),
        s.RopeAbsorbed(),
        s.QkvPacked(True),
        s.ResidualNormsFused(),
        s.NoGqaWarning(),
    ),
}

globals().update(fusion_suite.tests_for(EP, EXPECTATIONS))
