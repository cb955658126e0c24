"""PreNormDecoderLayer (attention + gated MLP + RMSNorms) vs transformers' own decoder
layers (Llama, Qwen3 with QK norm, Mistral with sliding window), prefill + one cached
decode step, batch 2 with a left-padded row. Weights come from the transformers layer's
state_dict by name, so attribute names must match the checkpoints.
"""

from __future__ import annotations

import importlib

import numpy as np
import onnx_ir as ir
import pytest

import torch
import transformers

from transformers.cache_utils import DynamicCache

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
from testing.references import additive_mask

DIMS = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=1,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rms_norm_eps=1e-5, rope_theta=10000.0)

FAMILIES = {
    "llama": ("LlamaDecoderLayer", "llama", {}),
    "llama_bias": ("LlamaDecoderLayer", "llama", {"attention_bias": True, "mlp_bias": True}),
    "qwen3": ("Qwen3DecoderLayer", "qwen3", {"head_dim": 16}),
    "mistral_window": ("MistralDecoderLayer", "mistral", {"sliding_window": 4}),
}


def _hf_layer(name):
    class_name, model_type, extra = FAMILIES[name]
    config = transformers.AutoConfig.for_model(model_type, **DIMS, **extra)
    config._attn_implementation = "eager"
    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    module = getattr(modeling, class_name)(config, layer_idx=0).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param_name, p in module.named_parameters():
            if "norm" in param_name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=generator))
    return config, module


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


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def layers(request, tmp_path_factory):
    hf_config, hf_layer = _hf_layer(request.param)
    overrides = {"qk_norm": True} if request.param == "qwen3" else {}
    config = ArchitectureConfig.from_dict(hf_config.to_dict(), **overrides)
    with build_context(None, ir.DataType.FLOAT):
        rotary = RotaryEmbedding(config.rope)
        layer = _mobius_layer(config)
    state = {k: v.detach().numpy().copy() for k, v in hf_layer.state_dict().items()}
    attach_arrays(layer, state, tmp_path_factory.mktemp(request.param))
    window = config.layer_sliding_window(0)

    def forward(op, input_ids, attention_mask, position_ids, hidden, past_key, past_value):
        cos, sin = rotary(op, position_ids)
        mask = causal_padding_mask(op, input_ids, attention_mask, ir.DataType.FLOAT, window,
                                   position_ids)
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
    return request.param, config, model, hf_config, hf_layer, window


def test_prefill_then_cached_decode_matches_transformers(layers):
    name, config, model, hf_config, hf_layer, window = layers
    rng = np.random.default_rng(0)
    batch, seq, pad = 2, 7, 3
    kv_shape = (batch, config.num_key_value_heads, 0, config.head_dim)
    rotary = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(hf_config)
    cache = DynamicCache(config=hf_config)
    blocked = float(np.finfo(np.float32).min)

    mask = np.ones((batch, seq), np.int64)
    mask[1, :pad] = 0
    hidden = rng.standard_normal((batch, seq, config.hidden_size)).astype(np.float32)
    past_key = past_value = np.zeros(kv_shape, np.float32)
    for step in range(3):  # prefill, then two decode steps
        seq_len = hidden.shape[1]
        positions = position_ids_for(mask, seq_len)
        out, past_key, past_value = run_model(model, {
            "input_ids": np.zeros((batch, seq_len), np.int64), "attention_mask": mask,
            "position_ids": positions, "hidden": hidden, "past_key": past_key,
            "past_value": past_value,
        }, check=step == 0)
        # A sliding-window cache in transformers holds only the last window-1 keys; give it
        # the matching right end of the mask (the dropped columns are blocked anyway).
        cached = getattr(cache.layers[0], "keys", None)
        held = 0 if cached is None or cached.numel() == 0 else cached.shape[2]
        full_mask = additive_mask(mask, seq_len, window, blocked).astype(np.float32)
        if window is not None:
            assert (full_mask[..., : -(held + seq_len)] == blocked).all()
        with torch.no_grad():
            position_embeddings = rotary(torch.zeros(1), torch.from_numpy(positions))
            expected = hf_layer(
                torch.from_numpy(hidden),
                attention_mask=torch.from_numpy(full_mask[..., -(held + seq_len):]),
                position_ids=torch.from_numpy(positions),
                cache=cache, use_cache=True, position_embeddings=position_embeddings,
            ).numpy()
        real = mask[:, -seq_len:].astype(bool)
        np.testing.assert_allclose(out[real], expected[real], rtol=1e-4, atol=2e-5,
                                   err_msg=f"{name} step {step}")
        # transformers' sliding-window cache keeps only the last window-1 entries; mobius
        # keeps them all (the mask hides the rest). Compare what both hold.
        hf_keys, hf_values = cache.layers[0].keys.numpy(), cache.layers[0].values.numpy()
        kept = hf_keys.shape[2]
        assert kept == past_key.shape[2] or (window is not None and kept >= window - 1)
        np.testing.assert_allclose(past_key[:, :, -kept:], hf_keys, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(past_value[:, :, -kept:], hf_values, rtol=1e-5, atol=1e-5)
        # Next step: one new token per row.
        hidden = rng.standard_normal((batch, 1, config.hidden_size)).astype(np.float32)
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
    assert past_key.shape[2] == seq + 2
    if window is not None:
        assert past_key.shape[2] > window  # the window really cut something off
