"""L3: mobius ONNX logits vs transformers, prefill + cached decode.

Every case: batch 2 with row 1 left-padded by 3, a 10-token prefill, then 3 greedy
decode steps feeding present.* back as past_key_values.* (testing/parity.py); the
decode tokens are chosen by the ONNX model and fed to both sides.

f32 must match to 1e-4. f16 and bf16 builds run in onnxruntime's CPU EP (it has no
bf16 kernels, so the default EP's bf16 graph keeps bf16 weights and I/O and computes
in float32 -- mobius/rewrite/float32_compute.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import transformers

from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint
from testing.model_runs import (
    build_package,
    f32_parity,
    low_precision_atol,
    onnx_greedy,
    ort_session,
    real_positions,
    run_decoder,
)

F32_TOLERANCE = 1e-4
PROMPT, STEPS, PAD = 10, 3, 3

# name: (tiny preset, config overrides)
CASES = {
    "llama": ("tiny-llama", {}),
    "llama_tied": ("tiny-llama", {"tie_word_embeddings": True}),
    "llama_bias": ("tiny-llama", {"attention_bias": True, "mlp_bias": True}),
    "mistral_sliding_window": ("tiny-mistral", {"sliding_window": 6}),
    "qwen2": ("tiny-qwen2", {}),
    "qwen2_untied": ("tiny-qwen2", {"tie_word_embeddings": False}),
    "qwen3": ("tiny-qwen3", {}),
    "qwen3_untied": ("tiny-qwen3", {"tie_word_embeddings": False}),
}
LOW_PRECISION_CASES = ["llama", "mistral_sliding_window", "qwen2", "qwen3"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(folder, transformers model) per case, made once per module."""
    made = {}

    def get(name):
        if name not in made:
            preset, overrides = CASES[name]
            folder = str(tmp_path_factory.mktemp(name) / "ckpt")
            make_hf_checkpoint(folder, preset, **overrides)
            made[name] = folder, load_hf_model(folder)
        return made[name]

    return get


# ---------------------------------------------------------------------------
# f32: exact parity
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_parity(name, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    built = build_package(folder, tmp_path / "onnx", "f32")
    _, overrides = CASES[name]
    config = built.config
    for key, value in overrides.items():  # the variant really is what we built
        attribute = {"attention_bias": "qkv_bias"}.get(key, key)
        assert getattr(config, attribute) == value, key
    if name == "mistral_sliding_window":
        assert config.sliding_window < PROMPT + STEPS  # the window cuts the sequence
    run = f32_parity(built, hf_model, prompt_len=PROMPT, steps=STEPS, pad=PAD)
    assert run.max_abs_diff <= F32_TOLERANCE, f"{name}: max |logit diff| {run.max_abs_diff:.3g}"
    assert len(run.onnx_steps) == STEPS + 1


def test_sliding_window_matters_for_this_sequence(checkpoint):
    """Guards test_f32_parity[mistral_sliding_window]: with the window the reference
    really differs from full attention, so a build that ignored it would fail."""
    folder, hf_model = checkpoint("mistral_sliding_window")
    full = transformers.AutoModelForCausalLM.from_pretrained(folder, sliding_window=None).eval()
    from testing import parity

    ids, mask = parity.make_batch(hf_model.config.vocab_size, PROMPT, PAD)
    tokens = [np.array([[5], [6]], np.int64) for _ in range(STEPS)]
    windowed = parity.hf_logits(hf_model, ids, mask, tokens)
    unwindowed = parity.hf_logits(full, ids, mask, tokens)
    assert np.abs(windowed[-1] - unwindowed[-1]).max() > 100 * F32_TOLERANCE


def test_left_padding_does_not_change_a_row(checkpoint, tmp_path):
    """Row 1 of the padded batch == the same tokens run alone without padding."""
    from testing import parity

    folder, _ = checkpoint("llama")
    built = build_package(folder, tmp_path / "onnx", "f32")
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
def test_low_precision_runs_close_to_f32_reference(name, dtype, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    built = build_package(folder, tmp_path / "onnx", dtype)
    run = f32_parity(built, hf_model, prompt_len=PROMPT, steps=STEPS, pad=PAD)
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
