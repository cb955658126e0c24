"""The torch side of internlm2_test (the reference_cases rule runs it at build time,
//rules:references.bzl).

transformers has no InternLM2 class (the hub checkpoints ship modeling_internlm2.py as
auto_map code, which no test runs), so each checkpoint is written in the hub layout by
testing/hf_checkpoints.make_hf_checkpoint (mobius' numpy writer: every tensor random,
biases included), and the reference is **transformers' LlamaForCausalLM with the weights
remapped** the way modeling_internlm2.py reads them: ``attention.wqkv`` viewed as
[kv_heads, q_per_kv + 2, head_dim, hidden] (a K/V group's query heads, then its key, then
its value), wo / w1 / w3 / w2 / the norms renamed, rope_scaling passed as config.json
gives it. Each case: ckpt/, padded.npz + unpadded.npz (testing/checkpoint_runs.py) and
transformers.json (greedy tokens for the genai test).
"""

from __future__ import annotations

import os

PRESET = "tiny-internlm2"
NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids

#: case -> config overrides of the preset (GQA 4 query heads over 2 K/V heads, biases)
CONFIGS: dict[str, dict] = {
    "gqa_bias": {},
    "no_bias": {"bias": False},
    "mha_tied": {"num_key_value_heads": None, "tie_word_embeddings": True},
    # the 10-token prompts run past max_position_embeddings 8: dynamic NTK rescales
    "rope_dynamic": {"rope_scaling": {"type": "dynamic", "factor": 3.0},
                     "max_position_embeddings": 8},
    "rope_linear": {"rope_scaling": {"type": "linear", "factor": 2.5}},
}
CASES = sorted(CONFIGS)

_RENAMES = (("model.tok_embeddings.", "model.embed_tokens."), ("output.", "lm_head."),
            (".attention.wo.", ".self_attn.o_proj."), (".feed_forward.w1.", ".mlp.gate_proj."),
            (".feed_forward.w3.", ".mlp.up_proj."), (".feed_forward.w2.", ".mlp.down_proj."),
            (".attention_norm.", ".input_layernorm."),
            (".ffn_norm.", ".post_attention_layernorm."))


def write_case(case: str, folder: str) -> None:
    from testing import checkpoint_runs, genai_harness
    from testing.hf_checkpoints import make_hf_checkpoint

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESET, seed=7,
                                    **CONFIGS[case])
    # a fresh model per run: dynamic NTK keeps the longest length it has seen (as
    # modeling_internlm2.py's cos/sin cache does), so an earlier run would change a later one
    for run, pad in checkpoint_runs.RUNS.items():
        checkpoint_runs.record(llama_reference(checkpoint), folder, {run: pad})
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"),
                                     llama_reference(checkpoint), PROMPTS, NEW_TOKENS)


def llama_reference(checkpoint: str):
    """transformers' LlamaForCausalLM holding the InternLM2 checkpoint's weights."""
    import torch
    import transformers
    from safetensors.torch import load_file

    from testing.hf_checkpoints import read_config

    raw = read_config(checkpoint)
    heads = raw["num_attention_heads"]
    kv_heads = raw.get("num_key_value_heads") or heads
    config = transformers.LlamaConfig(
        vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
        intermediate_size=raw["intermediate_size"], num_hidden_layers=raw["num_hidden_layers"],
        num_attention_heads=heads, num_key_value_heads=kv_heads,
        head_dim=raw["hidden_size"] // heads, hidden_act=raw["hidden_act"],
        max_position_embeddings=raw["max_position_embeddings"], rms_norm_eps=raw["rms_norm_eps"],
        rope_theta=raw["rope_theta"], rope_scaling=raw.get("rope_scaling"),
        attention_bias=raw.get("bias", True), mlp_bias=False,
        tie_word_embeddings=raw.get("tie_word_embeddings", False),
        bos_token_id=raw["bos_token_id"], eos_token_id=raw["eos_token_id"],
        pad_token_id=raw["pad_token_id"])
    state = {}
    for name, tensor in load_file(os.path.join(checkpoint, "model.safetensors")).items():
        if ".attention.wqkv." in name:
            state.update(_split_wqkv(name, tensor, heads // kv_heads, config.head_dim))
            continue
        for old, new in _RENAMES:
            name = name.replace(old, new)
        state[name] = tensor
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    model.load_state_dict(state, strict=not config.tie_word_embeddings)
    if config.tie_word_embeddings:
        model.tie_weights()
    model.generation_config.pad_token_id = raw["pad_token_id"]
    return model.eval()


def _split_wqkv(name: str, tensor, per_group: int, head_dim: int) -> dict:
    """wqkv [kv_heads * (per_group + 2) * head_dim, ...] -> Llama's q_proj / k_proj / v_proj."""
    grouped = tensor.reshape(-1, per_group + 2, head_dim, *tensor.shape[1:])
    base = name.replace(".attention.wqkv.", ".self_attn.{}.")
    return {base.format("q_proj"): grouped[:, :per_group].reshape(-1, *tensor.shape[1:]),
            base.format("k_proj"): grouped[:, per_group].reshape(-1, *tensor.shape[1:]),
            base.format("v_proj"): grouped[:, per_group + 1].reshape(-1, *tensor.shape[1:])}
