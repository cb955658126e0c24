"""A torch reference for Phi-3-small checkpoints (the test side: torch is imported inside
the functions), written from the published architecture, since transformers has no
class for it and no test runs the checkpoint's auto_map code.

It is transformers' LlamaForCausalLM (its KV cache, RoPE incl. LongRoPE, GQA and
``generate``) holding the checkpoint's weights, with Phi-3-small's parts put in:
``query_key_value`` split per K/V group (InternLM2's layout), biases on Q/K/V and
``dense``, LayerNorms with bias, the GeGELU MLP, the muP embedding / attention / logit
scales, and an attention function that masks each block-sparse layer with the block
layout computed here as the published description gives it: per head a [blocks, blocks]
table (causal blocks, the ``num_local_blocks`` nearest, and every key block with
``(block + 1 + h * max(1, vert_stride // heads)) % vert_stride == 0``), indexed by the
token positions of query and key (the running count of real tokens, as the hub's kernel
shifts its blocks by each row's left padding).
"""

from __future__ import annotations

import json
import os

NAME = "phi3small_reference"
_NAMES = ((".self_attn.dense.", ".self_attn.o_proj."), ("model.final_layernorm.", "model.norm."))


def phi3small_reference(checkpoint: str):
    """transformers' LlamaForCausalLM set up as the Phi-3-small checkpoint's model."""
    import torch
    import transformers
    from safetensors.torch import load_file

    from mobius.models.phi3small import intermediate_size, options_of

    with open(os.path.join(checkpoint, "config.json")) as f:
        raw = json.load(f)
    o = options_of(raw)
    heads, kv_heads = raw["num_attention_heads"], raw.get("num_key_value_heads", 8)
    d = raw["hidden_size"] // heads
    rope = {"rope_type": "default", **(raw.get("rope_scaling") or {}),
            "rope_theta": raw.get("rope_embedding_base", 10.0**6)}
    if rope.pop("type", None) in ("su", "longrope"):
        rope["rope_type"] = "longrope"
    config = transformers.LlamaConfig(
        vocab_size=raw["vocab_size"], hidden_size=raw["hidden_size"],
        intermediate_size=intermediate_size(raw), num_hidden_layers=raw["num_hidden_layers"],
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=d,
        max_position_embeddings=raw.get("max_position_embeddings", 8192),
        rope_parameters=rope, attention_bias=True,
        tie_word_embeddings=raw.get("tie_word_embeddings", True),
        bos_token_id=raw["bos_token_id"], eos_token_id=raw["eos_token_id"],
        pad_token_id=raw["pad_token_id"])
    if raw.get("original_max_position_embeddings"):
        config.original_max_position_embeddings = raw["original_max_position_embeddings"]
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    _put_parts(model, raw, o)
    state = {}
    for name, tensor in load_file(os.path.join(checkpoint, "model.safetensors")).items():
        if ".self_attn.query_key_value." in name:
            state.update(_split_qkv(name, tensor, heads // kv_heads, d))
            continue
        for old, new in _NAMES:
            name = name.replace(old, new)
        state[name] = tensor
    model.load_state_dict(state, strict=not config.tie_word_embeddings)
    if config.tie_word_embeddings:
        model.tie_weights()
    model.generation_config.pad_token_id = raw["pad_token_id"]
    return model.eval()


def _put_parts(model, raw: dict, o) -> None:
    """LayerNorms, GeGELU MLPs, muP scales and the block-sparse attention function."""
    import torch

    eps, size = raw.get("layer_norm_epsilon", 1e-5), raw["hidden_size"]
    heads = raw["num_attention_heads"]
    body = model.model
    body.norm = torch.nn.LayerNorm(size, eps)
    patterns = []
    for i, layer in enumerate(body.layers):
        layer.input_layernorm = torch.nn.LayerNorm(size, eps)
        layer.post_attention_layernorm = torch.nn.LayerNorm(size, eps)
        layer.mlp = GeGelu(size, model.config.intermediate_size, o.gegelu_limit)
        d = layer.self_attn.head_dim
        layer.self_attn.scaling = o.mup_attn_multiplier / d if o.mup_use_scaling else d**-0.5
        patterns.append(None if (i + 1) % o.dense_attention_every_n_layers == 0 else (
            o.blocksparse_block_size, o.blocksparse_num_local_blocks,
            o.blocksparse_vert_stride, o.blocksparse_homo_head_pattern, heads))
    if o.mup_embedding_multiplier > 0:
        body.embed_tokens.register_forward_hook(
            lambda m, args, out: out * o.mup_embedding_multiplier)
    model.lm_head.register_forward_hook(lambda m, args, out: out / o.mup_width_multiplier)
    state = {"mask": None}
    model.register_forward_pre_hook(
        lambda m, args, kwargs: state.update(mask=kwargs.get("attention_mask")), with_kwargs=True)
    name = f"{NAME}_{id(model)}"  # one registration per model: each has its own patterns
    _register(name, state, patterns)
    model.set_attn_implementation(name)


def _register(name: str, state: dict, patterns: list) -> None:
    import torch
    import transformers
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    from transformers.models.llama.modeling_llama import eager_attention_forward

    def attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
        batch, total = query.shape[0], key.shape[2]
        mask2d = state["mask"]
        if mask2d is None:
            mask2d = torch.ones(batch, total, dtype=torch.long)
        allowed = allowed_keys(mask2d[:, -total:], query.shape[2], patterns[module.layer_idx])
        bias = torch.zeros(allowed.shape, dtype=query.dtype).masked_fill(
            ~allowed, torch.finfo(query.dtype).min)
        return eager_attention_forward(module, query, key, value, bias, scaling, dropout,
                                       **kwargs)

    transformers.AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, eager_mask)


def allowed_keys(mask2d, q_len: int, pattern):
    """bool [batch, heads or 1, q_len, total]: causal by cache slot, real keys only, and
    for a block-sparse layer the block layout at the tokens' positions."""
    import torch

    total = mask2d.shape[1]
    slots = torch.arange(total)
    allowed = (slots[None, :] <= slots[total - q_len:, None])[None, None]
    allowed = allowed & mask2d.bool()[:, None, None, :]
    if pattern is None:
        return allowed
    block, local, vert, homo, heads = pattern
    positions = (mask2d.long().cumsum(-1) - 1).clamp(min=0)
    n_blocks = int(positions.max()) // block + 1
    layout = block_layout(n_blocks, heads, local, vert, homo)  # [heads, nb, nb]
    q_blocks = positions[:, total - q_len:] // block  # [batch, q_len]
    k_blocks = positions // block  # [batch, total]
    sparse = layout[:, q_blocks[:, :, None], k_blocks[:, None, :]]  # [heads, b, q, t]
    return allowed & sparse.permute(1, 0, 2, 3)


def block_layout(n_blocks: int, heads: int, local: int, vert: int, homo: bool):
    """bool [heads, n_blocks, n_blocks]: which key blocks each query block sees, per head."""
    import torch

    q, k = torch.arange(n_blocks)[:, None], torch.arange(n_blocks)[None, :]
    step = max(1, vert // heads)
    return torch.stack([(q >= k) & ((q - k < local) | ((k + (0 if homo else h * step) + 1)
                                                        % vert == 0)) for h in range(heads)])


def GeGelu(size: int, intermediate: int, limit: float):
    """Phi-3-small's MLP: up_proj [2 * intermediate] (even rows gelu, odd rows linear)."""
    import torch

    class _GeGelu(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up_proj = torch.nn.Linear(size, 2 * intermediate)
            self.down_proj = torch.nn.Linear(intermediate, size)

        def forward(self, x):
            h = self.up_proj(x)
            g, u = h[..., ::2], h[..., 1::2]
            g = torch.where(torch.isinf(g), g, g.clamp(max=limit))
            u = torch.where(torch.isinf(u), u, u.clamp(-limit, limit))
            return self.down_proj(g * torch.sigmoid(1.702 * g) * (u + 1))

    return _GeGelu()


def _split_qkv(name: str, tensor, per_group: int, head_dim: int) -> dict:
    """query_key_value [kv_heads * (per_group + 2) * head_dim, ...] -> q/k/v_proj."""
    grouped = tensor.reshape(-1, per_group + 2, head_dim, *tensor.shape[1:])
    base = name.replace(".self_attn.query_key_value.", ".self_attn.{}.")
    return {base.format("q_proj"): grouped[:, :per_group].reshape(-1, *tensor.shape[1:]),
            base.format("k_proj"): grouped[:, per_group].reshape(-1, *tensor.shape[1:]),
            base.format("v_proj"): grouped[:, per_group + 1].reshape(-1, *tensor.shape[1:])}
