"""gpt-oss: attention sinks, alternating sliding-window layers, clamped-SwiGLU experts.

* Attention: biased Q/K/V/O, YaRN RoPE, and one learned sink logit per head
  (``self_attn.sinks`` [heads]) in the softmax (mobius.components.attention_sinks).
  ``layer_types`` alternates sliding-window and full attention.
* MoE: router ``mlp.router`` (Linear with bias) -> top-k of the logits ->
  softmax over those k (= softmax over all, top-k, renormalized). Experts are
  read as the checkpoint stacks them: ``mlp.experts.gate_up_proj`` [E, H, 2I]
  (gate/up columns interleaved) + ``gate_up_proj_bias`` [E, 2I],
  ``down_proj`` [E, I, H] + ``down_proj_bias`` [E, H], with
  (clamp(u, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(g, limit)
  (``swiglu_alpha`` 1.702, ``swiglu_limit`` 7.0).
* MXFP4-quantized checkpoints (the hub's ``*_blocks`` / ``*_scales`` experts,
  ``quantization_config.quant_method`` "mxfp4") are read as these float stacks,
  dequantized exactly when read (mobius/weights/mxfp4.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.linear import Linear
from mobius.components.moe import SwiGlu, combine_experts, routing_weights, stacked_expert
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.config.options import read_options
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.llama import llama_attention
from mobius.models.mixtral import moe_int
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class GptOssOptions:
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    num_local_experts: int | None = None  # 128 when neither spelling is set
    num_experts: int | None = None  # another spelling of num_local_experts
    num_experts_per_tok: int = 4


class GptOssExperts(nn.Module):
    """The stacked expert tensors, named and shaped as in the checkpoint."""

    def __init__(self, hidden: int, inter: int, experts: int, act: SwiGlu):
        super().__init__()
        self.inter, self.num_experts, self.act = inter, experts, act
        self.dtype = get_build_dtype()
        self.gate_up_proj = Weight([experts, hidden, 2 * inter])
        self.gate_up_proj_bias = Weight([experts, 2 * inter])
        self.down_proj = Weight([experts, inter, hidden])
        self.down_proj_bias = Weight([experts, hidden])

    def forward(self, op, x, routing):
        experts = [stacked_expert(i, self.gate_up_proj, self.gate_up_proj_bias, self.down_proj,
                                  self.down_proj_bias, self.inter, self.act, self.dtype,
                                  out_in=False)
                   for i in range(self.num_experts)]
        return combine_experts(op, x, routing, experts, self.dtype)


class GptOssMoE(nn.Module):
    """``router`` + ``experts``; routing as mobius.components.moe.routing_weights (renormalized)."""

    def __init__(self, config: ArchitectureConfig, options: GptOssOptions):
        super().__init__()
        self.num_experts = moe_int("num_local_experts", options.num_local_experts, 128,
                                   alias=options.num_experts)
        self.top_k = moe_int("num_experts_per_tok", options.num_experts_per_tok)
        if self.top_k > self.num_experts:
            raise ConfigError(f"config.json: num_experts_per_tok ({self.top_k}) exceeds "
                              f"num_local_experts ({self.num_experts})")
        act = SwiGlu(options.swiglu_alpha, 1.0, options.swiglu_limit)
        self.dtype = get_build_dtype()
        self.router = Linear(config.hidden_size, self.num_experts, True)
        self.experts = GptOssExperts(config.hidden_size, config.intermediate_size,
                                     self.num_experts, act)

    def forward(self, op, x):
        routing = routing_weights(op, self.router(op, x), self.top_k, True, self.dtype)
        return self.experts(op, x, routing)


class GptOssForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        options = config.options
        eps, hidden = config.rms_norm_eps, config.hidden_size
        layers = [
            PreNormDecoderLayer(llama_attention(config, sinks=True), GptOssMoE(config, options),
                                RMSNorm(hidden, eps), RMSNorm(hidden, eps))
            for _ in range(config.num_hidden_layers)
        ]
        super().__init__(config, CausalTransformer(config, layers, RMSNorm(hidden, eps)))


def _defaults(raw: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' GptOssConfig defaults for keys a config.json may leave out (and
    the SwiGLU switches checked before any weight is read)."""
    raw = dict(raw)
    limit = read_options(GptOssOptions, raw).swiglu_limit
    if not limit > 0:
        raise ConfigError(f"config.json: swiglu_limit must be > 0, got {limit}")
    layers = raw.get("num_hidden_layers", 36)
    raw.setdefault("attention_bias", True)
    raw.setdefault("sliding_window", 128)
    raw.setdefault("rope_theta", 150000.0)
    if not raw.get("layer_types") and isinstance(layers, int) and not isinstance(layers, bool):
        raw["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                              for i in range(layers)]
    if not raw.get("rope_parameters") and not raw.get("rope_scaling"):
        raw["rope_parameters"] = {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                  "beta_slow": 1.0, "truncate": False,
                                  "original_max_position_embeddings": 4096}
    return raw


FAMILY = ModelFamily(
    name="gpt_oss", model_types=("gpt_oss",), architectures=("GptOssForCausalLM",),
    module=GptOssForCausalLM, normalize_raw=_defaults, tiny_preset="tiny-gpt_oss",
    cohorts=("genai", "every-dtype"), options=GptOssOptions, attention_traits=("attention_sinks",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-gpt_oss": {
        **COMMON, "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"],
        "head_dim": 16, "intermediate_size": 96, "num_local_experts": 5, "num_experts_per_tok": 2,
        "rms_norm_eps": 1e-5, "attention_bias": True, "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0,
        "swiglu_alpha": 1.702, "rope_theta": 150000.0, "rope_parameters": {
            "rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
            "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 64},
    },
}
