"""Falcon (7B/40B/180B, Falcon 2 / 3 dense): fused ``query_key_value``
projection, LayerNorm with shift, plain GELU MLP, RoPE, tied LM head.

The switches select the fused-QKV layout and the block arrangement:

* ``new_decoder_architecture`` (40B/180B): K/V grouped (``num_kv_heads``), the
  fused rows per KV group [its query heads, its key, its value]; always
  parallel (x + attn + mlp), with two norms (``ln_attn`` / ``ln_mlp``) unless
  ``num_ln_in_parallel_attn`` is 1.
* otherwise ``multi_query`` (7B): one K/V head after all query heads, or
  multi-head with rows per head [q, k, v]; ``parallel_attn`` chooses one shared
  norm for parallel branches or the sequential pre-norm block.
* ``bias``: every projection has a bias.

``alibi`` (the original Falcon-RW) and combinations transformers cannot run are
rejected up front.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.attention import Attention
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import FusedRows, Linear
from mobius.components.mlp import MLP
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options, reject
from mobius.models.family import ModelFamily
from mobius.tiny.bases import VOCAB_SIZE


@dataclasses.dataclass(frozen=True)
class FalconOptions:
    new_decoder_architecture: bool = False
    multi_query: bool = True
    parallel_attn: bool = True
    bias: bool = False
    alibi: bool = False
    num_ln_in_parallel_attn: int | None = None
    layer_norm_epsilon: float = 1e-5
    activation: str = "gelu"
    tie_word_embeddings: bool = True


def options_of(raw: Mapping[str, Any]) -> FalconOptions:
    """The switches, checked: what transformers cannot run is rejected here."""
    o = read_options(FalconOptions, raw)
    reject(o.alibi, "falcon", "alibi (ALiBi position biases instead of RoPE)")
    reject(o.new_decoder_architecture and not o.parallel_attn, "falcon",
           "new_decoder_architecture with parallel_attn false")
    reject(o.num_ln_in_parallel_attn not in (None, 1, 2), "falcon",
           f"num_ln_in_parallel_attn {o.num_ln_in_parallel_attn}")
    reject(not o.new_decoder_architecture and o.parallel_attn and o.num_ln_in_parallel_attn == 2,
           "falcon", "num_ln_in_parallel_attn 2 without new_decoder_architecture")
    return o


def qkv_rows(heads: int, kv_heads: int, d: int, grouped: bool) -> tuple[list[int], ...]:
    """Rows of Q, K and V in the fused projection ([q.., k, v] per KV group when
    ``grouped``; else [q, k, v] per head, or all queries then one K and one V)."""
    def block(start):
        return list(range(start * d, (start + 1) * d))

    if grouped:
        per = heads // kv_heads
        q = [r for g in range(kv_heads) for t in range(per) for r in block(g * (per + 2) + t)]
        k = [r for g in range(kv_heads) for r in block(g * (per + 2) + per)]
        v = [r for g in range(kv_heads) for r in block(g * (per + 2) + per + 1)]
    elif kv_heads == heads:
        q, k, v = ([r for h in range(heads) for r in block(3 * h + j)] for j in range(3))
    else:
        q = list(range(heads * d))
        k, v = block(heads), block(heads + 1)
    return q, k, v


class FalconDecoderLayer(nn.Module):
    """Parallel (x + attn(ln(x)) + mlp(ln'(x))) or sequential pre-norm block."""

    def __init__(self, config: ArchitectureConfig, o: FalconOptions, i: int):
        super().__init__()
        hidden, eps, d = config.hidden_size, o.layer_norm_epsilon, config.head_dim
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.self_attention = Attention(hidden, heads, kv_heads, d, config.rope.rotary_dim)
        prefix = f"transformer.h.{i}.self_attention"
        rows = qkv_rows(heads, kv_heads, d, o.new_decoder_architecture)
        total = (heads + 2 * kv_heads) * d
        self.self_attention.q_proj, self.self_attention.k_proj, self.self_attention.v_proj = (
            Linear(hidden, len(r), o.bias, fused=FusedRows(f"{prefix}.query_key_value", 0, len(r),
                                                            total, tuple(r)))
            for r in rows)
        self.self_attention.o_proj = Linear(heads * d, hidden, o.bias, prefix=f"{prefix}.dense")
        self.mlp = MLP(hidden, config.intermediate_size, config.hidden_act, o.bias,
                       names=("dense_h_to_4h", "dense_4h_to_h"))
        self.two_norms = o.new_decoder_architecture and o.num_ln_in_parallel_attn in (None, 2)
        self.parallel = o.new_decoder_architecture or o.parallel_attn
        if self.two_norms:
            self.ln_attn, self.ln_mlp = LayerNorm(hidden, eps), LayerNorm(hidden, eps)
        else:
            self.input_layernorm = LayerNorm(hidden, eps)
            if not self.parallel:
                self.post_attention_layernorm = LayerNorm(hidden, eps)

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        attn_in = self.ln_attn(op, hidden) if self.two_norms else self.input_layernorm(op, hidden)
        attn, present_key, present_value = self.self_attention(
            op, attn_in, cos, sin, mask, past_key, past_value)
        if not self.parallel:
            hidden = op.Add(hidden, attn)
            return (op.Add(hidden, self.mlp(op, self.post_attention_layernorm(op, hidden))),
                    present_key, present_value)
        mlp_in = self.ln_mlp(op, hidden) if self.two_norms else attn_in
        return op.Add(op.Add(hidden, attn), self.mlp(op, mlp_in)), present_key, present_value


class FalconForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = config.options  # checked by normalize_falcon
        body = CausalTransformer(
            config, [FalconDecoderLayer(config, o, i) for i in range(config.num_hidden_layers)],
            LayerNorm(config.hidden_size, o.layer_norm_epsilon),
            embedding_attribute="word_embeddings", layers_attribute="h", norm_attribute="ln_f")
        super().__init__(config, body, body_attribute="transformer")


def normalize_falcon(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Falcon's key spellings -> the standard ones; K/V heads from the layout switches."""
    out = dict(raw)
    for old, new in (("n_embed", "hidden_size"), ("n_head", "num_attention_heads"),
                     ("n_layer", "num_hidden_layers")):
        if out.get(old) is not None and out.get(new) is None:
            out[new] = out[old]
    o = options_of(out)
    heads = out.get("num_attention_heads")
    if o.new_decoder_architecture:
        out["num_key_value_heads"] = out.get("num_kv_heads") or heads
    else:
        out["num_key_value_heads"] = 1 if o.multi_query else heads
    if out.get("ffn_hidden_size") is None and out.get("hidden_size") is not None:
        out["ffn_hidden_size"] = 4 * out["hidden_size"]
    out["intermediate_size"] = out.get("ffn_hidden_size")
    out["hidden_act"] = o.activation
    out["tie_word_embeddings"] = o.tie_word_embeddings
    out.pop("head_dim", None)  # hidden_size // num_attention_heads, always
    return out


FAMILY = ModelFamily(
    name="falcon", model_types=("falcon",), architectures=("FalconForCausalLM",),
    module=FalconForCausalLM, tiny_preset="tiny-falcon", normalize_raw=normalize_falcon,
    cohorts=("genai",), options=FalconOptions,
    config_overrides=lambda raw: {"rms_norm_eps": options_of(raw).layer_norm_epsilon},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # Falcon 40B/180B layout: grouped fused QKV (2 query heads per K/V head), two norms.
    "tiny-falcon": {
        "model_type": "falcon", "architectures": ["FalconForCausalLM"], "vocab_size": VOCAB_SIZE,
        "hidden_size": 64, "num_attention_heads": 4, "num_kv_heads": 2, "num_hidden_layers": 2,
        "ffn_hidden_size": 172, "max_position_embeddings": 256, "layer_norm_epsilon": 1e-5,
        "new_decoder_architecture": True, "parallel_attn": True, "bias": True, "alibi": False,
        "multi_query": True, "activation": "gelu", "rope_theta": 10000.0,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": True,
    },
}
