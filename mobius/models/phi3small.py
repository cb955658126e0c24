"""Phi-3-small (microsoft/Phi-3-small-8k-instruct, -128k-instruct): a GQA decoder whose
checkpoint ships auto_map code (modeling_phi3_small.py + a Triton block-sparse kernel)
that mobius never runs; it builds from config.json + safetensors.

* ``query_key_value``: one fused projection with a bias, rows grouped per K/V head
  ([its query heads, its key, its value], InternLM2's layout); ``dense`` the output.
* MLP ``up_proj`` [2 * intermediate] -> GeGELU: even rows quick_gelu(min(x, limit)),
  odd rows (clip(x, -limit, limit) + 1), multiplied; ``down_proj``; biases on both.
* LayerNorm with bias (``layer_norm_epsilon``) before attention / MLP and at the end.
* muP: embeddings times ``mup_embedding_multiplier`` (when > 0), attention scale
  ``mup_attn_multiplier / head_dim`` with ``mup_use_scaling`` (else 1/sqrt(head_dim)),
  logits divided by ``mup_width_multiplier``.
* Layer i is dense when ``(i + 1) % dense_attention_every_n_layers == 0``, else
  block-sparse (mobius/components/block_sparse.py: the block layout, per head unless
  ``blocksparse_homo_head_pattern``), at every sequence length. It is exact attention
  under one [batch, heads, seq, total] mask shared by the sparse layers; within
  ``num_local_blocks * block_size`` tokens (1024 in the released models) it equals dense.
* RoPE base ``rope_embedding_base``; LongRoPE ("su") for the 128k model.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.block_sparse import BlockSparsePattern
from mobius.components.causal_transformer import CausalLM, CausalTransformer, scalar
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import FusedRows, Linear
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options, reject
from mobius.models.falcon import qkv_rows
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.tiny.bases import VOCAB_SIZE

#: quick_gelu's sigmoid slope
QUICK_GELU = 1.702


@dataclasses.dataclass(frozen=True)
class Phi3SmallOptions:
    """Phi3SmallConfig's switches, with its defaults."""

    gegelu_limit: float = 20.0
    mup_use_scaling: bool = True
    mup_attn_multiplier: float = 1.0
    mup_embedding_multiplier: float = 10.0
    mup_width_multiplier: float = 8.0
    dense_attention_every_n_layers: int = 2
    blocksparse_block_size: int = 64
    blocksparse_num_local_blocks: int = 16
    blocksparse_vert_stride: int = 8
    blocksparse_homo_head_pattern: bool = False
    rope_position_scale: float = 1.0

    def pattern(self, layer: int, num_heads: int) -> BlockSparsePattern | None:
        """Layer ``layer``'s block-sparse pattern, None for a dense layer."""
        if (layer + 1) % self.dense_attention_every_n_layers == 0:
            return None
        return BlockSparsePattern(self.blocksparse_block_size, self.blocksparse_num_local_blocks,
                                  self.blocksparse_vert_stride,
                                  self.blocksparse_homo_head_pattern, num_heads)


def options_of(raw: Mapping[str, Any]) -> Phi3SmallOptions:
    """The switches, checked: values the family cannot build are refused here."""
    o = read_options(Phi3SmallOptions, raw)
    for key in ("gegelu_limit", "dense_attention_every_n_layers"):
        reject(key in raw and raw[key] is None, "phi3small", f"{key} null")
    reject(raw.get("hidden_act", "gegelu") != "gegelu", "phi3small",
           f"hidden_act {raw.get('hidden_act')!r} (only gegelu)")
    reject(o.gegelu_limit <= 0, "phi3small", f"gegelu_limit {o.gegelu_limit}")
    reject(o.dense_attention_every_n_layers < 1, "phi3small",
           f"dense_attention_every_n_layers {o.dense_attention_every_n_layers}")
    for key in ("blocksparse_block_size", "blocksparse_num_local_blocks",
                "blocksparse_vert_stride"):
        reject(getattr(o, key) < 1, "phi3small", f"{key} {getattr(o, key)}")
    reject(o.rope_position_scale != 1.0, "phi3small",
           f"rope_position_scale {o.rope_position_scale}")
    reject(o.mup_width_multiplier <= 0, "phi3small",
           f"mup_width_multiplier {o.mup_width_multiplier}")
    scaling = raw.get("rope_scaling") or {}
    reject("short_mscale" in scaling or "long_mscale" in scaling, "phi3small",
           "rope_scaling short_mscale / long_mscale (one LongRoPE magnitude per table)")
    return o


class GeGeluMLP(nn.Module):
    """down_proj(quick_gelu(min(g, limit)) * (clip(u, -limit, limit) + 1)), g / u the even
    / odd rows of ``up_proj`` (read as two projections of the one fused tensor)."""

    def __init__(self, hidden: int, intermediate: int, limit: float, prefix: str):
        super().__init__()
        self.limit = limit
        total = 2 * intermediate
        self.gate_proj, self.up_proj = (
            Linear(hidden, intermediate, True,
                   fused=FusedRows(f"{prefix}.up_proj", 0, intermediate, total,
                                   tuple(range(parity, total, 2))))
            for parity in (0, 1))
        self.down_proj = Linear(intermediate, hidden, True)

    def forward(self, op, x):
        gate, up = self.gate_proj(op, x), self.up_proj(op, x)
        limit = scalar(op, self.limit)
        gate = op.Where(op.IsInf(gate), gate, op.Min(gate, limit))  # infinities pass
        up = op.Where(op.IsInf(up), up, op.Clip(up, op.Neg(limit), limit))
        gelu = op.Mul(gate, op.Sigmoid(op.Mul(gate, scalar(op, QUICK_GELU))))
        return self.down_proj(op, op.Mul(gelu, op.Add(up, scalar(op, 1.0))))


def _layer(config: ArchitectureConfig, i: int) -> PreNormDecoderLayer:
    o, prefix = config.options, f"model.layers.{i}"
    hidden, d = config.hidden_size, config.head_dim
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    scale = o.mup_attn_multiplier / d if o.mup_use_scaling else None
    attention = llama_attention(config, scale=scale)
    total = (heads + 2 * kv_heads) * d
    attention.q_proj, attention.k_proj, attention.v_proj = (
        Linear(hidden, len(r), True, fused=FusedRows(f"{prefix}.self_attn.query_key_value", 0,
                                                     len(r), total, tuple(r)))
        for r in qkv_rows(heads, kv_heads, d, grouped=True))
    attention.o_proj = Linear(heads * d, hidden, True, prefix=f"{prefix}.self_attn.dense")
    mlp = GeGeluMLP(hidden, config.intermediate_size, o.gegelu_limit, f"{prefix}.mlp")
    return PreNormDecoderLayer(attention, mlp, LayerNorm(hidden, config.rms_norm_eps),
                               LayerNorm(hidden, config.rms_norm_eps))


class Phi3SmallForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o = config.options
        layers = [_layer(config, i) for i in range(config.num_hidden_layers)]
        patterns = [o.pattern(i, config.num_attention_heads)
                    for i in range(config.num_hidden_layers)]
        embed_scale = o.mup_embedding_multiplier if o.mup_embedding_multiplier > 0 else None
        body = CausalTransformer(config, layers, LayerNorm(config.hidden_size, config.rms_norm_eps),
                                 embed_scale=embed_scale, norm_attribute="final_layernorm",
                                 layer_patterns=patterns)
        super().__init__(config, body, logits_divisor=o.mup_width_multiplier)


def intermediate_size(raw: Mapping[str, Any]) -> int:
    """Phi3SmallConfig.intermediate_size: ff_intermediate_size, else ff_dim_multiplier *
    (hidden // 3) * 2, rounded up to 256 with gegelu_pad_to_256."""
    if raw.get("ff_intermediate_size") is not None:
        return raw["ff_intermediate_size"]
    if raw.get("ff_dim_multiplier") is None:
        return 14336  # Phi3SmallConfig's ff_intermediate_size default
    size = raw["ff_dim_multiplier"] * (raw["hidden_size"] // 3) * 2
    return -(-size // 256) * 256 if raw.get("gegelu_pad_to_256", True) else size


def normalize_phi3small(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Phi3SmallConfig's spellings and defaults -> the standard keys (head_dim is always
    hidden / heads; embeddings tied unless config.json says otherwise)."""
    options_of(raw)
    out = {"num_key_value_heads": 8, "max_position_embeddings": 8192,
           "tie_word_embeddings": True, **raw}
    out.pop("head_dim", None)
    out["intermediate_size"] = intermediate_size(raw)
    out["rms_norm_eps"] = raw.get("layer_norm_epsilon", 1e-5)
    out["rope_theta"] = raw.get("rope_embedding_base", 10.0**6)
    out["hidden_act"] = "quick_gelu"  # GeGELU's gelu half; the MLP is the family's own
    return out


FAMILY = ModelFamily(
    name="phi3small", model_types=("phi3small",), architectures=("Phi3SmallForCausalLM",),
    cohorts=("every-dtype",),
    module=Phi3SmallForCausalLM, tiny_preset="tiny-phi3small", normalize_raw=normalize_phi3small,
    options=Phi3SmallOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json, in the hub
#: layout (auto_map names the checkpoint's own code, which mobius does not run). Blocks of
#: 2 tokens, 1 local block, vertical stride 3: the tests' prompts span several blocks, so
#: the first (block-sparse) layer's pattern differs from dense attention.
TINY_PRESETS = {
    "tiny-phi3small": {
        "model_type": "phi3small", "architectures": ["Phi3SmallForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_phi3_small.Phi3SmallConfig",
                     "AutoModelForCausalLM": "modeling_phi3_small.Phi3SmallForCausalLM"},
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "ff_intermediate_size": 88,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 256, "original_max_position_embeddings": 256,
        "layer_norm_epsilon": 1e-5, "hidden_act": "gegelu", "gegelu_limit": 0.06,
        "gegelu_pad_to_256": True, "rope_embedding_base": 10000.0,
        "rope_position_scale": 1.0, "rope_scaling": None,
        "mup_use_scaling": True, "mup_attn_multiplier": 1.5,
        "mup_embedding_multiplier": 3.0, "mup_width_multiplier": 2.5,
        "dense_attention_every_n_layers": 2, "blocksparse_block_size": 2,
        "blocksparse_num_local_blocks": 1, "blocksparse_vert_stride": 3,
        "blocksparse_homo_head_pattern": False, "blocksparse_triton_kernel_block_size": 2,
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    },
}
