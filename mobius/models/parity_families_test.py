"""L3 for every other registered decoder family: f32 logit parity with transformers on
its default tiny preset (prefill of a left-padded batch of 2 + 3 cached decode steps;
transformers' side recorded at build time by parity_families_cases.py).

The families with dedicated variants (Llama, Mistral, Qwen2, Qwen3: tied/untied,
biases, sliding window, f16/bf16) are in parity_test.py.
"""

from __future__ import annotations

import pytest

from mobius.models import parity_families_cases as cases
from mobius.models.parity_families_cases import OTHER_FAMILIES, STEPS
from testing.checkpoint_runs import checkpoint, reference
from testing.model_runs import build_package, f32_parity

F32_TOLERANCE = 1e-4


@pytest.mark.parametrize("family", OTHER_FAMILIES, ids=lambda f: f.name)
def test_f32_parity_other_families(family, tmp_path):
    """Every other registered decoder family, default tiny preset."""
    built = build_package(checkpoint(cases, family.tiny_preset), tmp_path / "onnx", "f32")
    run = f32_parity(built, reference(cases, family.tiny_preset), steps=STEPS)
    assert run.max_abs_diff <= F32_TOLERANCE, f"{family.name}: {run.max_abs_diff:.3g}"
