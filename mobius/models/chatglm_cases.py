"""The torch side of chatglm_test (the reference_cases rule runs it at build time,
//rules:references.bzl).

transformers has no ChatGLM class (the hub checkpoints ship modeling_chatglm.py as
auto_map code, which no test runs), so each checkpoint is written in the hub layout by
testing/hf_checkpoints.make_hf_checkpoint (mobius' numpy writer: every tensor random,
biases included), and the reference is **transformers' GlmForCausalLM** (the class
transformers converted ChatGLM into: partial 0.5 interleaved RoPE) **with the weights
remapped**: query_key_value split into [q | k | v] rows, dense_h_to_4h is GLM's
gate_up_proj, the rest renamed; base 10000 * rope_ratio, K/V heads
multi_query_group_num. Each case: ckpt/, padded.npz + unpadded.npz
(testing/checkpoint_runs.py) and transformers.json (greedy tokens for the genai test).
"""

from __future__ import annotations

import os

PRESET = "tiny-chatglm"
NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids

#: case -> config overrides of the preset (2 K/V groups, Q/K/V biases, rope_ratio 5)
CONFIGS: dict[str, dict] = {
    "gqa_qkv_bias": {},
    "mha_no_bias": {"multi_query_attention": False, "add_qkv_bias": False, "rope_ratio": 1.0},
}
CASES = sorted(CONFIGS)

_RENAMES = (("transformer.embedding.word_embeddings.", "model.embed_tokens."),
            ("transformer.encoder.final_layernorm.", "model.norm."),
            ("transformer.output_layer.", "lm_head."),
            ("transformer.encoder.layers.", "model.layers."),
            (".self_attention.dense.", ".self_attn.o_proj."),
            (".mlp.dense_h_to_4h.", ".mlp.gate_up_proj."),
            (".mlp.dense_4h_to_h.", ".mlp.down_proj."))


def write_case(case: str, folder: str) -> None:
    from testing import checkpoint_runs, genai_harness
    from testing.hf_checkpoints import make_hf_checkpoint

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESET, seed=7,
                                    **CONFIGS[case])
    model = glm_reference(checkpoint)
    checkpoint_runs.record(model, folder)
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"), model,
                                     PROMPTS, NEW_TOKENS)


def glm_reference(checkpoint: str):
    """transformers' GlmForCausalLM holding the ChatGLM checkpoint's weights."""
    import torch
    import transformers
    from safetensors.torch import load_file

    from testing.hf_checkpoints import read_config

    raw = read_config(checkpoint)
    heads, d = raw["num_attention_heads"], raw["kv_channels"]
    kv_heads = raw["multi_query_group_num"] if raw["multi_query_attention"] else heads
    config = transformers.GlmConfig(
        vocab_size=raw["padded_vocab_size"], hidden_size=raw["hidden_size"],
        intermediate_size=raw["ffn_hidden_size"], num_hidden_layers=raw["num_layers"],
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=d,
        max_position_embeddings=raw["seq_length"], rms_norm_eps=raw["layernorm_epsilon"],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0 * raw["rope_ratio"],
                         "partial_rotary_factor": 0.5},
        attention_bias=raw["add_qkv_bias"], hidden_act="silu",
        tie_word_embeddings=raw["tie_word_embeddings"], bos_token_id=raw["bos_token_id"],
        eos_token_id=raw["eos_token_id"], pad_token_id=raw["pad_token_id"])
    sizes = [heads * d, kv_heads * d, kv_heads * d]
    state = {}
    for name, tensor in load_file(os.path.join(checkpoint, "model.safetensors")).items():
        for old, new in _RENAMES:
            name = name.replace(old, new)
        if ".self_attention.query_key_value." in name:
            base = name.replace(".self_attention.query_key_value.", ".self_attn.{}.")
            for proj, part in zip(("q_proj", "k_proj", "v_proj"), tensor.split(sizes)):
                state[base.format(proj)] = part
            continue
        state[name] = tensor
    model = transformers.GlmForCausalLM(config).to(torch.float32)
    model.load_state_dict(state, strict=True)
    model.generation_config.pad_token_id = raw["pad_token_id"]
    return model.eval()
