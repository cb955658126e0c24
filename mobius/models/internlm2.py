"""InternLM2 (internlm/internlm2*): a Llama decoder under the hub's own tensor names.

The checkpoint ships ``auto_map`` code (modeling_internlm2.py) that mobius never runs:
it builds from config.json + safetensors. Differences from Llama are layout only:
one fused ``attention.wqkv`` whose rows are grouped per K/V head ([its query heads,
its key, its value], the same layout as Falcon-40B's query_key_value), ``attention.wo``,
``feed_forward.w1/w3/w2`` (gate / up / down), ``attention_norm`` / ``ffn_norm``,
``model.tok_embeddings`` and ``output``. ``bias`` (default on) puts a bias on wqkv and
wo; head_dim is always hidden_size / heads; ``rope_scaling`` is Llama's linear or
dynamic NTK scaling.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.linear import FusedRows, Linear
from mobius.components.lm_head import LMHead
from mobius.components.mlp import GatedMLP
from mobius.components.rms_norm import RMSNorm
from mobius.config.architecture import ArchitectureConfig
from mobius.models.falcon import qkv_rows
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class InternLM2Options:
    #: a bias on wqkv and wo (InternLM2Config's default)
    bias: bool = True


def _layer(config: ArchitectureConfig, i: int) -> PreNormDecoderLayer:
    prefix = f"model.layers.{i}"
    hidden, d, bias = config.hidden_size, config.head_dim, config.options.bias
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    attention = llama_attention(config, qkv_bias=bias, o_bias=bias)
    total = (heads + 2 * kv_heads) * d
    attention.q_proj, attention.k_proj, attention.v_proj = (
        Linear(hidden, len(r), bias, fused=FusedRows(f"{prefix}.attention.wqkv", 0, len(r),
                                                     total, tuple(r)))
        for r in qkv_rows(heads, kv_heads, d, grouped=True))
    attention.o_proj = Linear(heads * d, hidden, bias, prefix=f"{prefix}.attention.wo")
    mlp = GatedMLP(hidden, config.intermediate_size, config.hidden_act)
    mlp.gate_proj, mlp.up_proj, mlp.down_proj = (
        Linear(n_in, n_out, prefix=f"{prefix}.feed_forward.{name}")
        for name, n_in, n_out in (("w1", hidden, config.intermediate_size),
                                  ("w3", hidden, config.intermediate_size),
                                  ("w2", config.intermediate_size, hidden)))
    return PreNormDecoderLayer(attention, mlp, RMSNorm(hidden, config.rms_norm_eps),
                               RMSNorm(hidden, config.rms_norm_eps),
                               names=("attention_norm", "ffn_norm"))


class InternLM2ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        layers = [_layer(config, i) for i in range(config.num_hidden_layers)]
        body = CausalTransformer(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                                 embedding_attribute="tok_embeddings")
        super().__init__(config, body)
        if not config.tie_word_embeddings:
            self.lm_head = LMHead(config.hidden_size, config.vocab_size,
                                  checkpoint_name="output.weight")


def normalize_internlm2(raw: Mapping[str, Any]) -> dict[str, Any]:
    """head_dim is hidden_size / heads whatever config.json says; K/V heads default to
    the query heads (InternLM2Config's defaults)."""
    out = dict(raw)
    out.pop("head_dim", None)
    if out.get("num_key_value_heads") is None:
        out["num_key_value_heads"] = out.get("num_attention_heads")
    return out


FAMILY = ModelFamily(
    name="internlm2", model_types=("internlm2",), architectures=("InternLM2ForCausalLM",),
    module=InternLM2ForCausalLM, tiny_preset="tiny-internlm2", normalize_raw=normalize_internlm2,
    options=InternLM2Options,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json, in the hub
#: layout (auto_map names the checkpoint's own code, which mobius does not run)
TINY_PRESETS = {
    "tiny-internlm2": {
        **COMMON, "model_type": "internlm2", "architectures": ["InternLM2ForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config",
                     "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"},
        "bias": True, "rope_scaling": None,
    },
}
