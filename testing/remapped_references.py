"""transformers references for hub checkpoints that ship auto_map code (the test side only:
torch is imported inside each function).

transformers has no class for these model types and no test runs the checkpoint's own
modeling code, so each reference is transformers' nearest native model holding the
checkpoint's weights remapped as the checkpoint's modeling file reads them:

* internlm2 -> LlamaForCausalLM: ``attention.wqkv`` viewed as [kv_heads, q_per_kv + 2,
  head_dim, hidden] (a K/V group's query heads, then its key, then its value), wo / w1 /
  w3 / w2 / the norms renamed, ``bias`` on Q/K/V/O, rope_scaling as config.json gives it.
* chatglm -> GlmForCausalLM (the class transformers converted ChatGLM into: partial 0.5
  interleaved RoPE): query_key_value split into [q | k | v] rows, dense_h_to_4h is GLM's
  gate_up_proj, base 10000 * rope_ratio, K/V heads multi_query_group_num.
* phi3small -> LlamaForCausalLM with Phi-3-small's parts put in
  (testing/phi3small_reference.py: GeGELU, LayerNorms, muP, block-sparse attention).
* videochat_flash_qwen -> Qwen2ForCausalLM: the same names, the video tower / projector
  tensors left out.
* LFM2-Audio (no model_type: keyed by its architecture) -> Lfm2ForCausalLM of the ``lfm``
  section, ``lfm.*`` as ``model.*``, the head tied to the token embedding (liquid-audio's
  text logits), the audio encoder / depthformer tensors left out.

testing/hf_checkpoints.load_hf_model loads these through REFERENCES.
"""

from __future__ import annotations

import json
import os

from testing.phi3small_reference import phi3small_reference


def _config(checkpoint: str) -> dict:
    with open(os.path.join(checkpoint, "config.json")) as f:
        return json.load(f)


_INTERNLM2_NAMES = (("model.tok_embeddings.", "model.embed_tokens."), ("output.", "lm_head."),
            (".attention.wo.", ".self_attn.o_proj."), (".feed_forward.w1.", ".mlp.gate_proj."),
            (".feed_forward.w3.", ".mlp.up_proj."), (".feed_forward.w2.", ".mlp.down_proj."),
            (".attention_norm.", ".input_layernorm."),
            (".ffn_norm.", ".post_attention_layernorm."))


def llama_reference(checkpoint: str):
    """transformers' LlamaForCausalLM holding the InternLM2 checkpoint's weights."""
    import torch
    import transformers
    from safetensors.torch import load_file

    raw = _config(checkpoint)
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
        for old, new in _INTERNLM2_NAMES:
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


_CHATGLM_NAMES = (("transformer.embedding.word_embeddings.", "model.embed_tokens."),
            ("transformer.encoder.final_layernorm.", "model.norm."),
            ("transformer.output_layer.", "lm_head."),
            ("transformer.encoder.layers.", "model.layers."),
            (".self_attention.dense.", ".self_attn.o_proj."),
            (".mlp.dense_h_to_4h.", ".mlp.gate_up_proj."),
            (".mlp.dense_4h_to_h.", ".mlp.down_proj."))


def glm_reference(checkpoint: str):
    """transformers' GlmForCausalLM holding the ChatGLM checkpoint's weights."""
    import torch
    import transformers
    from safetensors.torch import load_file

    raw = _config(checkpoint)
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
        for old, new in _CHATGLM_NAMES:
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


def qwen2_reference(checkpoint: str):
    """transformers' Qwen2ForCausalLM holding a VideoChat-Flash checkpoint's language model."""
    import transformers

    raw = _config(checkpoint)
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "hidden_act", "rms_norm_eps",
            "max_position_embeddings", "rope_theta", "rope_scaling", "tie_word_embeddings",
            "use_sliding_window", "sliding_window", "max_window_layers", "bos_token_id",
            "eos_token_id", "pad_token_id")
    config = transformers.Qwen2Config(**{k: raw[k] for k in keys if k in raw})
    state = {name: tensor for name, tensor in _tensors(checkpoint).items()
             if not name.startswith(("model.vision_tower.", "model.mm_projector."))
             and not name.endswith("_newline")}
    return _loaded(transformers.Qwen2ForCausalLM(config), state, raw.get("pad_token_id"))


def lfm2_audio_reference(checkpoint: str):
    """transformers' Lfm2ForCausalLM holding an LFM2-Audio checkpoint's text decoder."""
    import transformers

    text = {k: v for k, v in _config(checkpoint)["lfm"].items()
            if k not in ("model_type", "architectures")}
    config = transformers.Lfm2Config(**{**text, "tie_word_embeddings": True})
    state = {"model." + name[len("lfm."):]: tensor
             for name, tensor in _tensors(checkpoint).items() if name.startswith("lfm.")}
    return _loaded(transformers.Lfm2ForCausalLM(config), state, text.get("pad_token_id"))


def _tensors(checkpoint: str) -> dict:
    from safetensors.torch import load_file

    return load_file(os.path.join(checkpoint, "model.safetensors"))


def _loaded(model, state: dict, pad_token_id):
    """``model`` in f32 holding ``state`` (every parameter, a tied head excepted)."""
    import torch

    model = model.to(torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = model.config.tie_word_embeddings
    if unexpected or set(missing) - ({"lm_head.weight"} if tied else set()):
        raise ValueError(f"reference: missing {missing}, unexpected {unexpected}")
    if tied:
        model.tie_weights()
    model.generation_config.pad_token_id = pad_token_id
    return model.eval()


#: model_type (an architecture where config.json has none) -> checkpoint folder -> the
#: remapped transformers model (eval mode, f32)
REFERENCES = {"internlm2": llama_reference, "chatglm": glm_reference,
              "phi3small": phi3small_reference, "videochat_flash_qwen": qwen2_reference,
              "Lfm2AudioForConditionalGeneration": lfm2_audio_reference}
