"""L3 for every other registered decoder family: f32 logit parity with transformers on
its default tiny preset (prefill of a left-padded batch of 2 + 3 cached decode steps).

The families with dedicated variants (Llama, Mistral, Qwen2, Qwen3: tied/untied,
biases, sliding window, f16/bf16) are in parity_test.py.
"""

from __future__ import annotations

import pytest

from mobius.models.registry import FAMILIES
from testing.hf_checkpoints import load_hf_model
from testing.model_runs import build_package, f32_parity, family_checkpoint

F32_TOLERANCE = 1e-4
PROMPT, STEPS, PAD = 10, 3, 3
_CORE = {"tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"}

OTHER_FAMILIES = [f for f in FAMILIES
                  if f.task.reference.runner == "greedy_decode" and f.tiny_preset not in _CORE]


@pytest.mark.parametrize("family", OTHER_FAMILIES, ids=lambda f: f.name)
def test_f32_parity_other_families(family, tmp_path):
    """Every other registered decoder family, default tiny preset."""
    folder = family_checkpoint(str(tmp_path / "ckpt"), family)
    built = build_package(folder, tmp_path / "onnx", "f32")
    run = f32_parity(built, load_hf_model(folder), prompt_len=PROMPT, steps=STEPS, pad=PAD)
    assert run.max_abs_diff <= F32_TOLERANCE, f"{family.name}: {run.max_abs_diff:.3g}"
