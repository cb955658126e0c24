"""ChatGLM2/3 and GLM-4-9b-chat (model_type "chatglm"): the hub's auto_map checkpoints.

The checkpoint ships modeling_chatglm.py, which mobius never runs: it builds from
config.json + safetensors under the hub's names (``transformer.embedding.word_embeddings``,
``transformer.encoder.layers.N.self_attention.query_key_value`` / ``dense``,
``mlp.dense_h_to_4h`` (gate then up) / ``dense_4h_to_h``, ``input_layernorm``,
``post_attention_layernorm``, ``transformer.encoder.final_layernorm``,
``transformer.output_layer``). The math is GLM's (transformers converted these
checkpoints into ``glm``): pre-norm RMSNorm, SwiGLU, grouped K/V heads
(``multi_query_group_num`` when ``multi_query_attention``), head size ``kv_channels``,
RoPE on the first half of each head with adjacent pairs rotating (``original_rope``),
base 10000 * ``rope_ratio``, context ``seq_length``. Biases on Q/K/V with
``add_qkv_bias``. Layouts no released checkpoint uses (LayerNorm, biases on every
projection, no final norm, residuals from the normed input, rotate-half RoPE) are
refused up front.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.linear import Linear, split_fused
from mobius.components.lm_head import LMHead
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options, reject
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import VOCAB_SIZE

@dataclasses.dataclass(frozen=True)
class ChatGLMOptions:
    """ChatGLMConfig's switches, with its defaults."""

    add_qkv_bias: bool = False
    add_bias_linear: bool = False
    rmsnorm: bool = True
    post_layer_norm: bool = True
    apply_residual_connection_post_layernorm: bool = False
    original_rope: bool = True
    multi_query_attention: bool = False
    multi_query_group_num: int = 1
    rope_ratio: float = 1.0


def options_of(raw: Mapping[str, Any]) -> ChatGLMOptions:
    """The switches, checked: layouts no released ChatGLM uses are refused."""
    o = read_options(ChatGLMOptions, raw)
    reject(o.add_bias_linear, "chatglm", "add_bias_linear (a bias on every projection)")
    reject(not o.rmsnorm, "chatglm", "rmsnorm false (LayerNorm)")
    reject(not o.post_layer_norm, "chatglm", "post_layer_norm false")
    reject(o.apply_residual_connection_post_layernorm, "chatglm",
           "apply_residual_connection_post_layernorm")
    reject(not o.original_rope, "chatglm", "original_rope false (rotate-half RoPE)")
    reject(o.rope_ratio <= 0, "chatglm", f"rope_ratio {o.rope_ratio}")
    return o


def _layer(config: ArchitectureConfig, i: int) -> PreNormDecoderLayer:
    prefix = f"transformer.encoder.layers.{i}"
    hidden, d = config.hidden_size, config.head_dim
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    attention = llama_attention(config, rotary_interleaved=True)
    attention.q_proj, attention.k_proj, attention.v_proj = split_fused(
        hidden, [heads * d, kv_heads * d, kv_heads * d],
        f"{prefix}.self_attention.query_key_value", config.qkv_bias)
    attention.o_proj = Linear(heads * d, hidden, prefix=f"{prefix}.self_attention.dense")
    mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act)
    mlp.gate_proj, mlp.up_proj = split_fused(hidden, [config.intermediate_size] * 2,
                                             f"{prefix}.mlp.dense_h_to_4h")
    mlp.down_proj = Linear(config.intermediate_size, hidden, prefix=f"{prefix}.mlp.dense_4h_to_h")
    return PreNormDecoderLayer(attention, mlp, RMSNorm(hidden, config.rms_norm_eps),
                               RMSNorm(hidden, config.rms_norm_eps))


class ChatGLMForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [_layer(config, i) for i in range(config.num_hidden_layers)]
        encoder = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                                    embedding_attribute="embedding.word_embeddings",
                                    layers_attribute="encoder.layers",
                                    norm_attribute="encoder.final_layernorm")
        super().__init__(config, encoder, body_attribute="transformer")
        if not config.tie_word_embeddings:
            self.lm_head = LMHead(config.hidden_size, config.vocab_size,
                                  checkpoint_name="transformer.output_layer.weight")


def normalize_chatglm(raw: Mapping[str, Any]) -> dict[str, Any]:
    """ChatGLMConfig's spellings -> the standard keys; K/V heads, head size and RoPE from
    its switches (half of each head rotates, base 10000 * rope_ratio)."""
    o = options_of(raw)
    out = dict(raw)
    for old, new in (("num_layers", "num_hidden_layers"), ("padded_vocab_size", "vocab_size"),
                     ("ffn_hidden_size", "intermediate_size"),
                     ("layernorm_epsilon", "rms_norm_eps"),
                     ("seq_length", "max_position_embeddings"), ("kv_channels", "head_dim")):
        if out.get(old) is not None:
            out[new] = out[old]
    out.setdefault("head_dim", 128)  # ChatGLMConfig's kv_channels default
    out.setdefault("rms_norm_eps", 1e-5)
    heads = out.get("num_attention_heads")
    out["num_key_value_heads"] = o.multi_query_group_num if o.multi_query_attention else heads
    out["hidden_act"] = "silu"
    out["rope_theta"] = 10000.0 * o.rope_ratio
    out["partial_rotary_factor"] = 0.5
    out.pop("rope_scaling", None)
    out.pop("rope_parameters", None)
    return out


FAMILY = ModelFamily(
    name="chatglm", model_types=("chatglm",),
    architectures=("ChatGLMModel", "ChatGLMForConditionalGeneration"),
    module=ChatGLMForCausalLM, tiny_preset="tiny-chatglm", normalize_raw=normalize_chatglm,
    options=ChatGLMOptions,
    config_overrides=lambda raw: {"qkv_bias": options_of(raw).add_qkv_bias, "o_bias": False},
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json, in the hub
#: layout of GLM-4-9b-chat (auto_map names the checkpoint's own code, which mobius does
#: not run): 4 query heads over 2 K/V groups of 16, Q/K/V biases, rope_ratio 5
TINY_PRESETS = {
    "tiny-chatglm": {
        "model_type": "chatglm", "architectures": ["ChatGLMModel"],
        "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                     "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration"},
        "padded_vocab_size": VOCAB_SIZE, "hidden_size": 64, "ffn_hidden_size": 172,
        "num_layers": 2, "num_attention_heads": 4, "kv_channels": 16,
        "multi_query_attention": True, "multi_query_group_num": 2, "seq_length": 256,
        "layernorm_epsilon": 1.5625e-07, "rmsnorm": True, "post_layer_norm": True,
        "add_qkv_bias": True, "add_bias_linear": False, "original_rope": True,
        "apply_residual_connection_post_layernorm": False, "rope_ratio": 5.0,
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": [2], "pad_token_id": 0,
    },
}
