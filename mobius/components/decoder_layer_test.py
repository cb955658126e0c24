"""PreNormDecoderLayer (attention + gated MLP + RMSNorms) vs transformers' own decoder
layers (Llama, Qwen3 with QK norm, Mistral with sliding window), prefill + two cached
decode steps, batch 2 with a left-padded row, recorded at build time (decoder_layer_cases.py).
Weights come from the transformers layer's state_dict by name, so attribute names must
match the checkpoints.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import decoder_layer_cases as cases
from mobius.components.attention import Attention
from mobius.components.attention_mask import causal_padding_mask
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.components.rotary import RotaryEmbedding
from mobius.config.architecture import ArchitectureConfig
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.parity import position_ids_for
from testing.recorded_arrays import load
from testing.reference_cases import case_dir
from testing.references import additive_mask


def _mobius_layer(config: ArchitectureConfig):
    eps = config.rms_norm_eps
    qk_norm = config.qk_norm
    return PreNormDecoderLayer(
        self_attn=Attention(config.hidden_size, config.num_attention_heads,
                            config.num_key_value_heads, config.head_dim, config.rope.rotary_dim,
                            qkv_bias=config.qkv_bias, o_bias=config.o_bias,
                            q_norm=RMSNorm(config.head_dim, eps) if qk_norm else None,
                            k_norm=RMSNorm(config.head_dim, eps) if qk_norm else None),
        mlp=GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act,
                     config.mlp_bias),
        input_layernorm=RMSNorm(config.hidden_size, eps),
        post_attention_layernorm=RMSNorm(config.hidden_size, eps),
    )


@pytest.fixture(scope="module", params=cases.CASES)
def layers(request, tmp_path_factory):
    with open(os.path.join(case_dir(cases, request.param), "config.json")) as f:
        hf_config = json.load(f)
    overrides = {"qk_norm": True} if request.param == "qwen3" else {}
    config = ArchitectureConfig.from_dict(hf_config, **overrides)
    with build_context(None, ir.DataType.FLOAT):
        rotary = RotaryEmbedding(config.rope)
        layer = _mobius_layer(config)
    attach_arrays(layer, load(cases, request.param, "state"),
                  tmp_path_factory.mktemp(request.param))
    window = config.layer_sliding_window(0)
    assert window == cases.window(request.param)  # the window transformers' run used

    def forward(op, input_ids, attention_mask, position_ids, hidden, past_key, past_value):
        cos, sin = rotary(op, position_ids)
        mask = causal_padding_mask(op, input_ids, attention_mask, ir.DataType.FLOAT, window)
        return layer(op, hidden, cos, sin, mask, past_key, past_value)

    f32, i64 = ir.DataType.FLOAT, ir.DataType.INT64
    kv = ["batch", config.num_key_value_heads, "past", config.head_dim]
    present = ["batch", config.num_key_value_heads, "total", config.head_dim]
    model = component_model(
        inputs=[("input_ids", i64, ["batch", "seq"]), ("attention_mask", i64, ["batch", "total"]),
                ("position_ids", i64, ["batch", "seq"]),
                ("hidden", f32, ["batch", "seq", config.hidden_size]),
                ("past_key", f32, kv), ("past_value", f32, kv)],
        forward=forward,
        outputs=["out", ("present_key", present), ("present_value", present)],
    )
    return request.param, config, model, window


def test_prefill_then_cached_decode_matches_transformers(layers):
    name, config, model, window = layers
    recorded = load(cases, name)
    batch = cases.BATCH
    past_key = past_value = np.zeros(
        (batch, config.num_key_value_heads, 0, config.head_dim), np.float32)
    for step in range(cases.STEPS):  # prefill, then two decode steps
        hidden, mask = recorded[f"hidden_{step}"], recorded[f"mask_{step}"]
        seq_len = hidden.shape[1]
        positions = position_ids_for(mask, seq_len)
        out, past_key, past_value = run_model(model, {
            "input_ids": np.zeros((batch, seq_len), np.int64), "attention_mask": mask,
            "position_ids": positions, "hidden": hidden, "past_key": past_key,
            "past_value": past_value,
        }, check=step == 0)
        # A sliding-window cache in transformers holds only the last window-1 keys; it was
        # given the matching right end of the mask: the dropped columns must be blocked.
        held = int(recorded[f"held_{step}"])
        full_mask = additive_mask(mask, seq_len, window, cases.BLOCKED).astype(np.float32)
        if window is not None:
            assert (full_mask[..., : -(held + seq_len)] == cases.BLOCKED).all()
        expected = recorded[f"out_{step}"]
        real = mask[:, -seq_len:].astype(bool)
        np.testing.assert_allclose(out[real], expected[real], rtol=1e-4, atol=2e-5,
                                   err_msg=f"{name} step {step}")
        # transformers' sliding-window cache keeps only the last window-1 entries; mobius
        # keeps them all (the mask hides the rest). Compare what both hold.
        hf_keys, hf_values = recorded[f"keys_{step}"], recorded[f"values_{step}"]
        kept = hf_keys.shape[2]
        assert kept == past_key.shape[2] or (window is not None and kept >= window - 1)
        np.testing.assert_allclose(past_key[:, :, -kept:], hf_keys, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(past_value[:, :, -kept:], hf_values, rtol=1e-5, atol=1e-5)
    assert past_key.shape[2] == cases.SEQ + 2
    if window is not None:
        assert past_key.shape[2] > window  # the window really cut something off
