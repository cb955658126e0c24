"""L3: mobius ONNX logits vs transformers, prefill + cached decode.

Every case: batch 2 with row 1 left-padded by 3, a 10-token prefill, then 3 greedy
decode steps feeding present.* back as past_key_values.* (testing/parity.py); the
decode tokens are transformers' greedy choices, fed to both sides. transformers' side
(checkpoints, recorded logits) is written at build time by parity_cases.py.

f32 must match to 1e-4. f16 and bf16 builds run in onnxruntime's CPU EP (it has no
bf16 kernels, so the default EP's bf16 graph keeps bf16 weights and I/O and computes
in float32 -- mobius/rewrite/float32_compute.py).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from mobius.models import parity_cases as cases
from mobius.models.parity_cases import CONFIGS, PAD, PROMPT, STEPS
from testing.model_runs import (
    build_package,
    f32_parity,
    low_precision_atol,
    onnx_greedy,
    ort_session,
    real_positions,
    run_decoder,
)
from testing.checkpoint_runs import checkpoint, reference
from testing.reference_cases import case_dir

F32_TOLERANCE = 1e-4
LOW_PRECISION_CASES = ["llama", "mistral_sliding_window", "qwen2", "qwen3"]


# ---------------------------------------------------------------------------
# f32: exact parity
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_f32_parity(name, tmp_path):
    built = build_package(checkpoint(cases, name), tmp_path / "onnx", "f32")
    _, overrides = CONFIGS[name]
    config = built.config
    for key, value in overrides.items():  # the variant really is what we built
        attribute = {"attention_bias": "qkv_bias"}.get(key, key)
        assert getattr(config, attribute) == value, key
    if name == "mistral_sliding_window":
        assert config.sliding_window < PROMPT + STEPS  # the window cuts the sequence
    run = f32_parity(built, reference(cases, name), steps=STEPS)
    assert run.max_abs_diff <= F32_TOLERANCE, f"{name}: max |logit diff| {run.max_abs_diff:.3g}"
    assert len(run.onnx_steps) == STEPS + 1


def test_sliding_window_matters_for_this_sequence():
    """Guards test_f32_parity[mistral_sliding_window]: with the window the reference
    really differs from full attention, so a build that ignored it would fail
    (transformers' logits both ways: cases._write_window_logits)."""
    with np.load(os.path.join(case_dir(cases, "mistral_sliding_window"), "window.npz")) as last:
        assert np.abs(last["windowed"] - last["full"]).max() > 100 * F32_TOLERANCE


def test_left_padding_does_not_change_a_row(tmp_path):
    """Row 1 of the padded batch == the same tokens run alone without padding."""
    from testing import parity

    built = build_package(checkpoint(cases, "llama"), tmp_path / "onnx", "f32")
    session = ort_session(built.model_path)
    config = built.config
    ids, mask = parity.make_batch(config.vocab_size, PROMPT, PAD)
    batched, tokens = onnx_greedy(session, config, ids, mask, STEPS, np.float32)
    layers = config.num_hidden_layers
    kv_shape = (1, config.num_key_value_heads, 0, config.head_dim)
    past = {f"past_key_values.{i}.{kind}": np.zeros(kv_shape, np.float32)
            for i in range(layers) for kind in ("key", "value")}
    alone_ids, alone_mask = ids[1:, PAD:], mask[1:, PAD:]
    assert alone_mask.all()
    for step in range(STEPS + 1):
        result = run_decoder(session, {
            "input_ids": alone_ids, "attention_mask": alone_mask,
            "position_ids": parity.position_ids_for(alone_mask, alone_ids.shape[1]), **past})
        expected = batched[0][1, PAD:] if step == 0 else batched[step][1]
        np.testing.assert_allclose(result["logits"][0], expected, atol=1e-5)
        past = {f"past_key_values.{i}.{kind}": result[f"present.{i}.{kind}"]
                for i in range(layers) for kind in ("key", "value")}
        if step < STEPS:
            alone_ids = tokens[step][1:]
            alone_mask = np.concatenate([alone_mask, [[1]]], axis=1)


# ---------------------------------------------------------------------------
# f16 / bf16: runs, finite, close to the f32 reference
# ---------------------------------------------------------------------------

# Tolerance (testing/model_runs.low_precision_atol):
# |onnx_lowp - transformers_f32| <= 4 * eps(dtype) * max(1, max|logit|).
# f16: every weight and activation is rounded to f16 (relative error eps/2 each).
# bf16: weights, the KV cache and the logits are bf16, activations float32. Through
# 2 tiny layers (RMSNorm re-normalizes between them) the accumulated logit error
# measured ~0.8 eps (f16) and ~0.5-1.2 eps (bf16) times the logit scale on these
# models, so 4 eps leaves >= 3x headroom, while a real bug (wrong rope, missing norm,
# broken mask) shows up at the scale of the logits themselves.


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("name", LOW_PRECISION_CASES)
def test_low_precision_runs_close_to_f32_reference(name, dtype, tmp_path):
    built = build_package(checkpoint(cases, name), tmp_path / "onnx", dtype)
    run = f32_parity(built, reference(cases, name), steps=STEPS)
    for step in run.onnx_steps:
        assert np.isfinite(step).all()
    atol = low_precision_atol(run, dtype)
    assert run.max_abs_diff <= atol, f"{name} {dtype}: {run.max_abs_diff:.3g} > {atol:.3g}"
    # Greedy agreement: wherever the f32 reference's top-1 leads its top-2 by more than
    # twice the tolerance, the low-precision argmax must be the same token; overall,
    # most positions must agree.
    agree = []
    for onnx_rows, hf_rows in real_positions(run):
        top2 = np.sort(hf_rows, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 2 * atol
        same = onnx_rows.argmax(-1) == hf_rows.argmax(-1)
        assert same[clear].all(), f"{name} {dtype}: argmax differs at a clear position"
        agree.extend(same.tolist())
    assert np.mean(agree) >= 0.9, f"{name} {dtype}: argmax agreement {np.mean(agree):.2f}"
