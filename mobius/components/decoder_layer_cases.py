"""transformers' side of decoder_layer_test (//rules:references.bzl): each family's own
decoder layer, every parameter random, run on a prefill and two cached decode steps.

A case folder holds config.json (the layer's config), state.npz (its state_dict) and
arrays.npz: per step i, the inputs hidden_i / mask_i, transformers' output out_i, its
cache after the step (keys_i, values_i) and held_i, the keys its cache held before it.
"""

from __future__ import annotations

import importlib
import json
import os

import numpy as np

DIMS = dict(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=1,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rms_norm_eps=1e-5, rope_theta=10000.0)

FAMILIES = {
    "llama": ("LlamaDecoderLayer", "llama", {}),
    "llama_bias": ("LlamaDecoderLayer", "llama", {"attention_bias": True, "mlp_bias": True}),
    "qwen3": ("Qwen3DecoderLayer", "qwen3", {"head_dim": 16}),
    "mistral_window": ("MistralDecoderLayer", "mistral", {"sliding_window": 4}),
}
CASES = sorted(FAMILIES)
BATCH, SEQ, PAD, STEPS = 2, 7, 3, 3  # row 1 left-padded; prefill, then two decode steps
BLOCKED = float(np.finfo(np.float32).min)


def window(case: str) -> int | None:
    """The sliding window the case's layer attends through (None: all keys)."""
    return FAMILIES[case][2].get("sliding_window")


def _hf_layer(name):
    import torch
    import transformers

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


def _steps(case: str, hf_config, hf_layer) -> dict[str, np.ndarray]:
    """The prefill and decode steps through transformers' layer with its own cache."""
    import torch
    import transformers
    from transformers.cache_utils import DynamicCache

    from testing.parity import position_ids_for
    from testing.references import additive_mask

    rng = np.random.default_rng(0)
    rotary = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(hf_config)
    cache = DynamicCache(config=hf_config)
    mask = np.ones((BATCH, SEQ), np.int64)
    mask[1, :PAD] = 0
    hidden = rng.standard_normal((BATCH, SEQ, DIMS["hidden_size"])).astype(np.float32)
    arrays = {}
    for step in range(STEPS):
        seq_len = hidden.shape[1]
        positions = position_ids_for(mask, seq_len)
        # A sliding-window cache in transformers holds only the last window-1 keys; give it
        # the matching right end of the mask (the dropped columns are blocked anyway).
        cached = getattr(cache.layers[0], "keys", None)
        held = 0 if cached is None or cached.numel() == 0 else cached.shape[2]
        full_mask = additive_mask(mask, seq_len, window(case), BLOCKED).astype(np.float32)
        with torch.no_grad():
            position_embeddings = rotary(torch.zeros(1), torch.from_numpy(positions))
            out = hf_layer(
                torch.from_numpy(hidden),
                attention_mask=torch.from_numpy(full_mask[..., -(held + seq_len):]),
                position_ids=torch.from_numpy(positions),
                cache=cache, use_cache=True, position_embeddings=position_embeddings,
            ).numpy()
        arrays.update({f"hidden_{step}": hidden, f"mask_{step}": mask, f"out_{step}": out,
                       f"held_{step}": np.int64(held),
                       f"keys_{step}": cache.layers[0].keys.numpy(),
                       f"values_{step}": cache.layers[0].values.numpy()})
        hidden = rng.standard_normal((BATCH, 1, DIMS["hidden_size"])).astype(np.float32)
        mask = np.concatenate([mask, np.ones((BATCH, 1), np.int64)], axis=1)
    return arrays


def write_case(case: str, folder: str) -> None:
    """config.json, state.npz and arrays.npz (see the module docstring)."""
    from testing import recorded_arrays

    hf_config, hf_layer = _hf_layer(case)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config.to_dict(), f, indent=1)
    state = {k: v.detach().numpy().copy() for k, v in hf_layer.state_dict().items()}
    recorded_arrays.save(folder, state, "state")
    recorded_arrays.save(folder, _steps(case, hf_config, hf_layer))
