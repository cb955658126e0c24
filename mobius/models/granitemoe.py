"""GraniteMoE: Granite's four scalar multipliers around a Mixtral-style sparse MoE.

Routing: top ``num_experts_per_tok`` router logits -> softmax over those k,
which equals softmax over all experts -> top-k -> renormalized (SparseMoE
with ``normalize_top_k``). Each expert is SiLU-gated with
``intermediate_size`` features. The checkpoint stacks the experts:
``block_sparse_moe.input_linear.weight`` [E, 2I, H] (gate rows, then up rows),
``block_sparse_moe.output_linear.weight`` [E, H, I] and the router
``block_sparse_moe.router.layer.weight`` [E, H]; each expert's Linears read
their slice, so the graph is the same per-expert form as Mixtral's.
"""

from __future__ import annotations

import dataclasses

from mobius.components.causal_transformer import CausalLM, CausalTransformer
from mobius.components.decoder_layer import PreNormDecoderLayer
from mobius.components.moe import SparseMoE
from mobius.components.rms_norm import RMSNorm
from mobius.components.weight import Weight, transpose
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.granite import GraniteOptions
from mobius.models.llama import llama_attention
from mobius.models.mixtral import moe_int
from mobius.tiny.bases import COMMON


@dataclasses.dataclass(frozen=True)
class GraniteMoeOptions(GraniteOptions):
    """Granite's multipliers and the experts."""

    num_local_experts: int = 8
    num_experts_per_tok: int = 2


def _stacked(shape: list[int], stacked_shape: list[int], name: str, expert: int,
             rows: slice) -> Weight:
    """A [in, out] MatMul weight read from rows ``rows`` of expert ``expert`` of ``name``."""
    return Weight(shape, checkpoint_shape=stacked_shape, checkpoint_name=name,
                  transform=lambda a: transpose(a[expert, rows]))


#: checkpoint names (under ``block_sparse_moe``) of the router and the stacked experts
GRANITEMOE_NAMES = ("router.layer.weight", "input_linear.weight", "output_linear.weight")


def granitemoe_block(config: ArchitectureConfig, layer: int,
                     names: tuple[str, str, str] = GRANITEMOE_NAMES) -> SparseMoE:
    """SparseMoE whose router and experts read GraniteMoE's stacked checkpoint tensors
    (``config.options``: a GraniteMoeOptions); ``names``: their spellings (router,
    [E, 2I, H] gate-then-up rows, [E, H, I])."""
    experts = moe_int("num_local_experts", config.options.num_local_experts)
    top_k = moe_int("num_experts_per_tok", config.options.num_experts_per_tok)
    if top_k > experts:
        raise ConfigError(f"config.json: num_experts_per_tok ({top_k}) exceeds "
                          f"num_local_experts ({experts})")
    hidden, inter = config.hidden_size, config.intermediate_size
    moe = SparseMoE(hidden, inter, experts, top_k, normalize_top_k=True,
                    activation=config.hidden_act)
    prefix = f"model.layers.{layer}.block_sparse_moe"
    router, fc1_name, fc2_name = (f"{prefix}.{name}" for name in names)
    moe.gate.weight = Weight([hidden, experts], checkpoint_shape=[experts, hidden],
                             checkpoint_name=router, transform=transpose)
    fc1, fc2 = [experts, 2 * inter, hidden], [experts, hidden, inter]
    for e, expert in enumerate(moe.experts):
        expert.gate_proj.weight = _stacked([hidden, inter], fc1, fc1_name, e, slice(0, inter))
        expert.up_proj.weight = _stacked([hidden, inter], fc1, fc1_name, e,
                                         slice(inter, 2 * inter))
        expert.down_proj.weight = _stacked([inter, hidden], fc2, fc2_name, e, slice(None))
    return moe


class GraniteMoeForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        o, eps = config.options, config.rms_norm_eps
        layers = [
            PreNormDecoderLayer(
                llama_attention(config, scale=o.attention_multiplier),
                granitemoe_block(config, i),
                RMSNorm(config.hidden_size, eps),
                RMSNorm(config.hidden_size, eps),
                residual_scale=o.residual_multiplier,
            )
            for i in range(config.num_hidden_layers)
        ]
        model = CausalTransformer(config, layers, RMSNorm(config.hidden_size, eps),
                                  embed_scale=o.embedding_multiplier)
        super().__init__(config, model, logits_divisor=o.logits_scaling)


FAMILY = ModelFamily(
    name="granitemoe", model_types=("granitemoe",), architectures=("GraniteMoeForCausalLM",),
    cohorts=("every-dtype",),
    module=GraniteMoeForCausalLM, tiny_preset="tiny-granitemoe", options=GraniteMoeOptions,
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-granitemoe": {
        **COMMON, "model_type": "granitemoe", "architectures": ["GraniteMoeForCausalLM"],
        "intermediate_size": 36, "num_local_experts": 6, "num_experts_per_tok": 2,
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
        "attention_multiplier": 0.0078125, "logits_scaling": 8.0,
    },
}
