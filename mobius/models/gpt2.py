"""GPT-2: learned absolute positions, LayerNorm, biases everywhere, Conv1D
weights stored [in, out] (no transpose at load), one fused c_attn projection
split into Q/K/V at load time, tanh GELU, no RoPE, tied LM head."""

from __future__ import annotations

from typing import Any, Mapping

from onnxscript import nn

from mobius.components.attention import Attention
from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.embedding import Embedding
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear, split_fused
from mobius.components.mlp import MLP
from mobius.config.architecture import ArchitectureConfig
from mobius.models.family import ModelFamily
from mobius.tiny.bases import VOCAB_SIZE


class GPT2Block(nn.Module):
    """x + attn(ln_1(x)), then x + mlp(ln_2(x)); attribute names as in transformers."""

    def __init__(self, config: ArchitectureConfig, i: int):
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        prefix = f"transformer.h.{i}"
        self.ln_1 = LayerNorm(hidden, eps)
        self.attn = Attention(hidden, config.num_attention_heads, config.num_attention_heads,
                              config.head_dim, None)
        self.attn.q_proj, self.attn.k_proj, self.attn.v_proj = split_fused(
            hidden, [hidden] * 3, f"{prefix}.attn.c_attn", bias=True, conv1d=True)
        self.attn.o_proj = Linear(hidden, hidden, True, conv1d=True, prefix=f"{prefix}.attn.c_proj")
        self.ln_2 = LayerNorm(hidden, eps)
        self.mlp = MLP(hidden, config.intermediate_size, config.hidden_act,
                       fc1=Linear(hidden, config.intermediate_size, True, conv1d=True,
                                  prefix=f"{prefix}.mlp.c_fc"),
                       fc2=Linear(config.intermediate_size, hidden, True, conv1d=True,
                                  prefix=f"{prefix}.mlp.c_proj"))

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        attn, present_key, present_value = self.attn(
            op, self.ln_1(op, hidden), cos, sin, mask, past_key, past_value
        )
        hidden = op.Add(hidden, attn)
        hidden = op.Add(hidden, self.mlp(op, self.ln_2(op, hidden)))
        return hidden, present_key, present_value


class GPT2LMHeadModel(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        body = CausalTransformer(
            config,
            [GPT2Block(config, i) for i in range(config.num_hidden_layers)],
            LayerNorm(config.hidden_size, config.rms_norm_eps),
            layer_rope_kinds=[None] * config.num_hidden_layers,
            embedding_attribute="wte", layers_attribute="h", norm_attribute="ln_f",
            position_embedding=Embedding(config.max_position_embeddings, config.hidden_size),
        )
        super().__init__(config, body, body_attribute="transformer")


_KEYS = {"n_embd": "hidden_size", "n_head": "num_attention_heads", "n_layer": "num_hidden_layers",
         "n_positions": "max_position_embeddings", "layer_norm_epsilon": "layer_norm_eps",
         "activation_function": "hidden_act"}


def normalize_gpt2(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(raw)
    for old, new in _KEYS.items():
        if old in raw and new not in raw:
            out[new] = raw[old]
    if out.get("intermediate_size") is None:
        out["intermediate_size"] = raw.get("n_inner") or 4 * out["hidden_size"]
    out.setdefault("tie_word_embeddings", True)
    return out


FAMILY = ModelFamily(
    name="gpt2", model_types=("gpt2",), architectures=("GPT2LMHeadModel",),
    module=GPT2LMHeadModel, tiny_preset="tiny-gpt2", normalize_raw=normalize_gpt2,
    config_overrides=lambda raw: {"rms_norm_eps": float(raw.get("layer_norm_eps", 1e-5))},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-gpt2": {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB_SIZE,
        "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 256, "n_inner": 172,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": True,
    },
}
