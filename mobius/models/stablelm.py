"""StableLM (2 / Zephyr / 3B-4E1T): LayerNorm with shift, SiLU-gated MLP,
partial RoPE (default factor 0.25), optional QKV bias (``use_qkv_bias``),
optional per-head LayerNorm of queries and keys with one norm per head
(``qk_layernorm``), and optionally GPT-NeoX's parallel residual
(``use_parallel_residual``: x + attn(ln(x)) + mlp(ln(x)), one norm)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import ParallelDecoderLayer, PreNormDecoderLayer
from mobius.components.layer_norm import LayerNorm, PerHeadLayerNorm
from mobius.components.mlp import GatedMLP
from mobius.config.architecture import ArchitectureConfig
from mobius.config.rope import with_partial_rotary_default
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class StableLmOptions:
    use_qkv_bias: bool = False
    qk_layernorm: bool = False
    use_parallel_residual: bool = False
    layer_norm_eps: float = 1e-5


def _layer(config: ArchitectureConfig, options: StableLmOptions):
    hidden, eps, d = config.hidden_size, options.layer_norm_eps, config.head_dim
    norms = {}
    if options.qk_layernorm:
        norms = dict(q_norm=PerHeadLayerNorm(d, config.num_attention_heads, eps),
                     k_norm=PerHeadLayerNorm(d, config.num_key_value_heads, eps))
    attention = llama_attention(config, qkv_bias=options.use_qkv_bias, o_bias=False,
                                qk_norm_names=("q_layernorm", "k_layernorm"), **norms)
    mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act)
    if options.use_parallel_residual:
        return ParallelDecoderLayer(attention, mlp, LayerNorm(hidden, eps))
    return PreNormDecoderLayer(attention, mlp, LayerNorm(hidden, eps), LayerNorm(hidden, eps))


class StableLmForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        options = config.options
        layers = [_layer(config, options) for _ in range(config.num_hidden_layers)]
        norm = LayerNorm(config.hidden_size, options.layer_norm_eps)
        super().__init__(config, CausalTransformer(config, layers, norm))


def normalize_stablelm(raw: Mapping[str, Any]) -> dict[str, Any]:
    """StableLM's partial_rotary_factor defaults to 0.25, not 1; its head size is
    always hidden_size / heads (a head_dim key is ignored, as transformers does)."""
    out = with_partial_rotary_default(raw, 0.25)
    out.pop("head_dim", None)
    return out


FAMILY = ModelFamily(
    name="stablelm", model_types=("stablelm",), architectures=("StableLmForCausalLM",),
    module=StableLmForCausalLM, tiny_preset="tiny-stablelm", normalize_raw=normalize_stablelm,
    cohorts=("genai",),
    options=StableLmOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-stablelm": {**COMMON, "model_type": "stablelm", "architectures": ["StableLmForCausalLM"],
                      "layer_norm_eps": 1e-5, "use_qkv_bias": True, "qk_layernorm": True,
                      "partial_rotary_factor": 0.25},
}
