"""The dense families' test cases, all in one place: a new family adds its rows here and
nowhere else in the tests. transformers' side of dense_families_test (the
reference_cases rule runs it at build time, //rules:references.bzl): each parity
case's random checkpoint and transformers' logits on it, and the facts the test takes
from transformers' config and model classes; plus the cases that need no reference
(REVERT_NEEDS, REJECTED).
"""

from __future__ import annotations

import json
import os

#: parity case: (tiny preset, config overrides, config.json edit that reverts the switch or None).
PARITY: dict[str, tuple[str, dict, dict | None]] = {
    "olmo": ("tiny-olmo", {}, None),
    "olmo_clip_qkv": ("tiny-olmo", {}, {"clip_qkv": None}),
    "olmo_no_bias": ("tiny-olmo", {"attention_bias": False, "clip_qkv": None}, None),
    "starcoder2": ("tiny-starcoder2", {}, {"use_bias": False}),
    "starcoder2_sliding_window": ("tiny-starcoder2", {"sliding_window": 4},
                                  {"sliding_window": None}),
    "stablelm": ("tiny-stablelm", {}, {"qk_layernorm": False}),
    "stablelm_qkv_bias": ("tiny-stablelm", {}, {"use_qkv_bias": False}),
    "stablelm_parallel_residual": ("tiny-stablelm", {"use_parallel_residual": True},
                                   {"use_parallel_residual": False}),
    "stablelm_rotary_half": ("tiny-stablelm", {"partial_rotary_factor": 0.5},
                             {"rope_parameters.partial_rotary_factor": None}),
    "cohere": ("tiny-cohere", {}, {"use_qk_norm": False}),
    "cohere_logit_scale": ("tiny-cohere", {}, {"logit_scale": None}),
    "cohere_untied": ("tiny-cohere", {"tie_word_embeddings": False, "use_qk_norm": False}, None),
    "cohere2": ("tiny-cohere2", {}, {"sliding_window": 64}),
    "glm": ("tiny-glm", {}, {"attention_bias": False}),
    "glm_full_rotary": ("tiny-glm", {"partial_rotary_factor": 1.0},
                        {"rope_parameters.partial_rotary_factor": None}),
    "glm4": ("tiny-glm4", {}, {"attention_bias": False}),
    "nemotron": ("tiny-nemotron", {}, {"attention_bias": False}),
    "nemotron_mlp_bias": ("tiny-nemotron", {}, {"mlp_bias": False}),
    "nemotron_full_rotary": ("tiny-nemotron", {"partial_rotary_factor": 1.0},
                             {"rope_parameters.partial_rotary_factor": None}),
    "falcon": ("tiny-falcon", {}, {"bias": False}),
    "falcon_one_norm": ("tiny-falcon", {"num_ln_in_parallel_attn": 1},
                        {"num_ln_in_parallel_attn": None}),
    "falcon_7b_multi_query": ("tiny-falcon", {"new_decoder_architecture": False, "bias": False,
                                              "tie_word_embeddings": False},
                              {"parallel_attn": False}),
    "falcon_multi_head_sequential": ("tiny-falcon", {"new_decoder_architecture": False,
                                                     "multi_query": False, "parallel_attn": False,
                                                     "num_kv_heads": 4},
                                     {"parallel_attn": True}),
    "exaone4": ("tiny-exaone4", {}, {"sliding_window": 64}),
    "exaone4_no_sliding_window": ("tiny-exaone4", {"sliding_window": None,
                                                   "layer_types": ["full_attention"] * 3}, None),
    "ernie4_5": ("tiny-ernie4_5", {}, {"use_bias": False}),
    "ernie4_5_untied": ("tiny-ernie4_5", {"tie_word_embeddings": False, "use_bias": False},
                        None),
    "seed_oss": ("tiny-seed_oss", {}, {"attention_out_bias": False}),
    "seed_oss_qkv_bias": ("tiny-seed_oss", {}, {"attention_bias": False}),
    "seed_oss_mlp_bias": ("tiny-seed_oss", {}, {"mlp_bias": False}),
    "internlm3": ("tiny-internlm3", {}, {"attention_bias": None, "mlp_bias": None}),
    "arcee": ("tiny-arcee", {}, {"hidden_act": "silu"}),
    "arcee_mlp_bias": ("tiny-arcee", {}, {"mlp_bias": None}),
    "olmo3": ("tiny-olmo3", {}, {"sliding_window": 64}),
    "olmo3_sliding_rope": ("tiny-olmo3", {},
                           {"rope_parameters.sliding_attention.rope_theta": 40000.0}),
    "olmo3_full_yarn": ("tiny-olmo3", {"rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 40000.0,
                           "original_max_position_embeddings": 64}}},
        {"rope_parameters.full_attention.rope_type": "default"}),
    "apertus": ("tiny-apertus", {}, {"rope_parameters.rope_type": "default"}),
    "apertus_relu2": ("tiny-apertus", {"hidden_act": "relu2"}, {"hidden_act": "silu"}),
    "hunyuan_v1_dense": ("tiny-hunyuan_v1_dense", {}, {"attention_bias": False}),
    "hunyuan_v1_dense_ntk_alpha": (
        "tiny-hunyuan_v1_dense", {"rope_parameters": {"rope_type": "dynamic", "alpha": 50.0,
                                                      "factor": 1.0, "rope_theta": 10000.0}},
        {"rope_parameters.alpha": None}),
    # top-2 of 5 + the shared MLP on every layer; per-layer top-k (1, then 3), no biases
    "hunyuan_v1_moe": ("tiny-hunyuan_v1_moe", {}, {"attention_bias": False}),
    "hunyuan_v1_moe_topk_per_layer": ("tiny-hunyuan_v1_moe",
                                      {"moe_topk": [1, 3], "attention_bias": False},
                                      {"moe_topk": 2}),
    # GLM-4.7-Flash-like: q LoRA, interleaved RoPE, layers sparse / dense / sparse, 2 of 4
    # groups, renormalized, scaled 1.8, q/kv/o biases
    "glm4_moe_lite": ("tiny-glm4_moe_lite", {}, {"attention_bias": False}),
    "glm4_moe_lite_norm_topk_prob": ("tiny-glm4_moe_lite", {}, {"norm_topk_prob": False}),
    "glm4_moe_lite_routed_scaling": ("tiny-glm4_moe_lite", {}, {"routed_scaling_factor": 1.0}),
    "glm4_moe_lite_topk_group": ("tiny-glm4_moe_lite", {}, {"topk_group": 4}),
    # Glm4MoeLiteConfig's layout: no mlp_layer_types (layer 0 dense), plain q_proj, rotate-half
    "glm4_moe_lite_default_layers_no_q_lora": (
        "tiny-glm4_moe_lite", {"mlp_layer_types": None, "q_lora_rank": None,
                               "rope_interleave": False}, {"rope_interleave": True}),
    # granite-swash: sinks, window 4 on layers 0 and 2, RoPE bases 40000 / NoPE / 10000
    "granite_swa": ("tiny-granite_swa", {}, {"layer_types": ["full_attention"] * 3}),
    "granite_swa_layer_rope_theta": ("tiny-granite_swa", {}, {"layer_rope_theta": None}),
    "granite_swa_biases": ("tiny-granite_swa", {}, {"attention_bias": False, "mlp_bias": False}),
    "granitemoe_swa": ("tiny-granitemoe_swa", {}, {"shared_intermediate_size": 0}),
    "granitemoe_swa_no_shared_mlp": (
        "tiny-granitemoe_swa", {"shared_intermediate_size": 0, "attention_bias": False},
        {"num_experts_per_tok": 3}),
    # gpt-oss (sinks random: every parameter is; sliding window 4 < the 10-token prompt)
    "gpt_oss": ("tiny-gpt_oss", {}, {"layer_types": ["full_attention"] * 2}),
    "gpt_oss_yarn": ("tiny-gpt_oss", {}, {"rope_parameters.rope_type": "default"}),
    "gpt_oss_swiglu_limit": ("tiny-gpt_oss", {"swiglu_limit": 0.3}, {"swiglu_limit": None}),
    "gpt_oss_swiglu_alpha": ("tiny-gpt_oss", {"swiglu_alpha": 0.5}, {"swiglu_alpha": None}),
    "gpt_oss_no_bias_top3": ("tiny-gpt_oss", {"attention_bias": False, "num_experts_per_tok": 3},
                             {"attention_bias": None}),
}

#: The pattern switches whose transformers layer types the test checks.
COHERE2_PATTERNS = [2, 4]
EXAONE4_PATTERNS = [2, 4]

#: case -> the tensor its reverted config needs but the checkpoint lacks (a structural
#: switch: reverting it makes the build refuse the checkpoint instead of changing logits).
REVERT_NEEDS: dict[str, str] = {
    "stablelm_parallel_residual": "post_attention_layernorm",
    "falcon_one_norm": "ln_attn",
    "falcon_7b_multi_query": "post_attention_layernorm",
    "gpt_oss_no_bias_top3": "q_proj.bias",
}

#: (preset, overrides, expected message part): switch values a family rejects up front.
REJECTED: dict[str, tuple[str, dict, str]] = {
    "cohere2_zero_pattern": ("tiny-cohere2", {"layer_types": None, "sliding_window_pattern": 0},
                             "sliding_window_pattern 0"),
    "cohere2_null_window": ("tiny-cohere2", {"sliding_window": None},
                            "sliding_attention layers with sliding_window null"),
    "cohere_zero_logit_scale": ("tiny-cohere", {"logit_scale": 0.0}, "logit_scale 0"),
    "exaone4_bad_pattern": ("tiny-exaone4", {"layer_types": None, "sliding_window_pattern": "LXG"},
                            "sliding_window_pattern 'LXG'"),
    "hunyuan_bad_alpha": ("tiny-hunyuan_v1_dense",
                          {"rope_parameters": {"rope_type": "dynamic", "alpha": -1.0}},
                          "alpha must be a positive number"),
    "hunyuan_moe_short_topk_list": ("tiny-hunyuan_v1_moe", {"moe_topk": [2]},
                                    "moe_topk lists 1 values for 2 layers"),
    "hunyuan_moe_topk_above_experts": ("tiny-hunyuan_v1_moe", {"moe_topk": 6},
                                       r"moe_topk must be in 1..num_experts \(5\), got 6"),
    "glm4_moe_lite_bad_mlp_layer_types": ("tiny-glm4_moe_lite",
                                          {"mlp_layer_types": ["sparse", "moe", "sparse"]},
                                          "mlp_layer_types must name 'dense' or 'sparse'"),
    "granite_swa_negative_rope_theta": ("tiny-granite_swa",
                                        {"layer_rope_theta": [10000.0, -1.0, 0]},
                                        "layer_rope_theta must give each of the 3 layers"),
    "internlm3_unequal_biases": ("tiny-internlm3", {"bias": False},
                                 "qkv_bias True with bias False"),
    "olmo_clip_qkv_type": ("tiny-olmo", {"clip_qkv": "yes"}, "'clip_qkv' must be float"),
    "falcon_alibi": ("tiny-falcon", {"alibi": True}, "falcon: alibi"),
    "falcon_sequential_new_architecture": ("tiny-falcon", {"parallel_attn": False},
                                           "new_decoder_architecture with parallel_attn false"),
    "gpt_oss_bad_limit": ("tiny-gpt_oss", {"swiglu_limit": 0.0}, "swiglu_limit must be > 0"),
    "falcon_two_norms_old_architecture": (
        "tiny-falcon", {"new_decoder_architecture": False, "num_ln_in_parallel_attn": 2},
        "num_ln_in_parallel_attn 2 without"),
}


#: OLMo 3 config.json spellings whose per-layer-type RoPE and layer types the test checks
#: against Olmo3Config: transformers 4.x keys (rope_scaling + a rope_theta that is not
#: Olmo3Config's default), and no layer_types
OLMO3_CONFIGS = {
    "yarn_4x": {"num_hidden_layers": 6, "rope_theta": 10000.0,
                "rope_scaling": {"rope_type": "yarn", "factor": 2.0,
                                 "original_max_position_embeddings": 1024}},
    "no_rope_keys": {"num_hidden_layers": 8},
}

#: model_type: config.json head_dim (absent or inconsistent) whose transformers head size
#: the test checks (HunYuan: transformers itself needs head_dim in config.json).
HEAD_DIM_CASES = {
    "ernie4_5": None, "glm": None, "glm4": None, "stablelm": 24, "cohere2": 24, "cohere": None,
    "nemotron": None, "exaone4": None, "olmo": None, "starcoder2": None, "seed_oss": None,
    "internlm3": None,
}

#: what the reference_cases rule writes: a folder per parity case, and "transformers" (facts.json)
CASES = [*sorted(PARITY), "transformers"]


def head_dim_config(model_type: str) -> dict:
    """The 1-layer config.json whose head size the test compares."""
    raw = {"model_type": model_type, "vocab_size": 300, "hidden_size": 64,
           "intermediate_size": 100, "num_hidden_layers": 1, "num_attention_heads": 4,
           "num_key_value_heads": 2, "pad_token_id": 0, "rope_theta": 10000.0}
    if HEAD_DIM_CASES[model_type] is not None:
        raw["head_dim"] = HEAD_DIM_CASES[model_type]
    return raw


def write_case(case: str, folder: str) -> None:
    """A parity case: ckpt/ (every parameter random), padded.npz (the left-padded run) and
    unpadded.npz (the same prompts unpadded). "transformers": facts.json."""
    if case == "transformers":
        with open(os.path.join(folder, "facts.json"), "w") as f:
            json.dump(_transformers_facts(), f, indent=1)
        return
    from testing import checkpoint_runs
    from testing.random_checkpoint import random_checkpoint

    preset, overrides, _ = PARITY[case]
    checkpoint_runs.write(folder, lambda ckpt: random_checkpoint(ckpt, preset, **overrides))


def _transformers_facts() -> dict:
    """Layer types transformers derives from the sliding-window patterns, and the head size
    its attention really has (q_proj rows / heads) for each HEAD_DIM_CASES config."""
    import transformers

    head_dims = {}
    for model_type in HEAD_DIM_CASES:
        raw = head_dim_config(model_type)
        hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**raw))
        head_dims[model_type] = hf.model.layers[0].self_attn.q_proj.out_features // 4
    return {
        "cohere2_layer_types": {str(p): list(transformers.Cohere2Config(
            num_hidden_layers=6, sliding_window_pattern=p).layer_types) for p in COHERE2_PATTERNS},
        "exaone4_layer_types": {str(p): list(transformers.Exaone4Config(
            num_hidden_layers=6, sliding_window=4, sliding_window_pattern=p).layer_types)
            for p in EXAONE4_PATTERNS},
        "head_dim": head_dims,
        "olmo3": {name: {"rope_parameters": config.rope_parameters,
                         "layer_types": list(config.layer_types)}
                  for name, config in ((name, transformers.Olmo3Config.from_dict(
                      {"vocab_size": 300, "hidden_size": 64, "num_attention_heads": 4, **raw}))
                      for name, raw in OLMO3_CONFIGS.items())},
    }
