"""transformers' side of lfm2_families_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each checkpoint (every parameter random, LFM2-MoE's zero
expert_bias randomized) with transformers' padded and unpadded runs
(testing/checkpoint_runs.py); "lfm2_no_rope": lfm2's without a RoPE base in config.json,
its padded run and the base transformers then uses (facts.json).
"""

from __future__ import annotations

import json
import os

PRESET, MOE, LFM3 = "tiny-lfm2", "tiny-lfm2-moe", "tiny-lfm3"
LFM3_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
             "full_attention": {"rope_type": "proportional", "rope_theta": 40000.0,
                                "partial_rotary_factor": 0.5}}  # tiny-lfm3's
NO_ROPE = {"rope_parameters": None, "rope_theta": None}  # config.json without a RoPE base

#: checkpoint: (preset, config overrides). tiny-lfm2: conv / attention / conv, kernel 3,
#: feed-forward 2/3 x 172 x 1.5 rounded up to a multiple of 12, no conv biases.
#: tiny-lfm2-moe: the same stack, a dense first layer, then top-2 of 6 experts on sigmoid +
#: expert_bias, renormalized, scaled by 1.5. tiny-lfm3: conv / sliding (window 4) / full /
#: conv, q/k/v/o biases, head gates, sandwich norms, proportional RoPE on the full layer.
CONFIGS: dict[str, tuple[str, dict]] = {
    "lfm2": (PRESET, {"conv_bias": True}),
    # attention first, kernel 5, no biases, tied embeddings, a large norm epsilon
    "attention_first_kernel5": (PRESET, {"layer_types": ["full_attention", "conv", "conv"],
                                         "conv_L_cache": 5, "tie_word_embeddings": True,
                                         "norm_eps": 0.5}),
    # the feed-forward width as written (no 2/3, no multiple)
    "ff_as_written": (PRESET, {"block_auto_adjust_ff_dim": False, "full_attn_idxs": [0, 2]}),
    "moe": (MOE, {"conv_bias": True}),
    # chosen on p alone, not renormalized, not scaled, top-3, every layer sparse
    "moe_plain_routing": (MOE, {"use_expert_bias": False, "norm_topk_prob": False,
                                "routed_scaling_factor": 1.0, "num_experts_per_tok": 3,
                                "num_dense_layers": 0}),
    # chosen on p + expert_bias, not renormalized, scaled by 2.5
    "moe_bias_unnormalized": (MOE, {"norm_topk_prob": False, "routed_scaling_factor": 2.5}),
    "lfm3": (LFM3, {}),
    # no gates, sandwich norms or attention biases; conv biases, kernel 4, untied, a large
    # norm epsilon; a "default" full-layer RoPE whose partial factor transformers ignores
    "lfm3_plain": (LFM3, {"use_sandwich_norm": False, "use_attention_gate": False,
                          "attention_bias": False, "conv_bias": True, "conv_L_cache": 4,
                          "tie_word_embeddings": False, "norm_eps": 0.5,
                          "layer_types": ["sliding_attention", "conv", "full_attention",
                                          "sliding_attention"],
                          "rope_parameters": {**LFM3_ROPE, "full_attention": {
                              "rope_type": "default", "rope_theta": 40000.0,
                              "partial_rotary_factor": 0.5}}}),
    # Lfm3Config's defaults (DEFAULTED keys left out of config.json): 5 layers conv, conv,
    # full, conv, sliding; window 256; head_dim 128; kernel 7; gates, sandwich norms, tied
    "lfm3_defaults": (LFM3, {"num_hidden_layers": 5, "layer_types": None,
                             "rope_parameters": None, "head_dim": 128, "sliding_window": 256,
                             "conv_L_cache": 7, "attention_bias": False}),
}

#: case -> the config.json keys left out after transformers wrote it (both sides then
#: read their defaults)
DEFAULTED = {"lfm3_defaults": (
    "rope_parameters", "layer_types", "sliding_window", "use_sandwich_norm",
    "use_attention_gate", "attention_bias", "tie_word_embeddings", "head_dim", "norm_eps",
    "conv_bias", "conv_L_cache")}

CASES = [*sorted(CONFIGS), "lfm2_no_rope"]


def edit(folder: str, edits: dict) -> None:
    """Sets (None: removes) top-level config.json keys."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        raw = json.load(f)
    for key, value in edits.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    with open(path, "w") as f:
        json.dump(raw, f)


def write_case(case: str, folder: str) -> None:
    """ckpt/, padded.npz, unpadded.npz; lfm2_no_rope: ckpt/, padded.npz, facts.json
    ({"rope_theta": transformers' base})."""
    from testing import checkpoint_runs

    if case != "lfm2_no_rope":
        checkpoint_runs.write(folder, lambda ckpt: _checkpoint(ckpt, case))
        return
    bare = checkpoint_runs.write(folder, lambda ckpt: _bare(_checkpoint(ckpt, "lfm2")),
                              {"padded": 3})
    import transformers

    config = transformers.AutoConfig.from_pretrained(bare)
    with open(os.path.join(folder, "facts.json"), "w") as f:
        json.dump({"rope_theta": config.rope_parameters["rope_theta"]}, f)


def _checkpoint(folder: str, case: str) -> str:
    from testing.hf_checkpoints import randomize_zero_tensors
    from testing.random_checkpoint import random_checkpoint

    preset, overrides = CONFIGS[case]
    folder = randomize_zero_tensors(random_checkpoint(folder, preset, **overrides))
    edit(folder, dict.fromkeys(DEFAULTED.get(case, ())))
    return folder


def _bare(folder: str) -> str:
    edit(folder, NO_ROPE)
    return folder

