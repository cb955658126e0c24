"""Gemma 4 text decoder (Gemma4ForCausalLM, model_type "gemma4_text").

Gemma 3's sandwich-norm layers with sliding and global layers, and beyond them:

* RMSNorm scales by ``w`` (not Gemma 3's ``1 + w``); Q and K are normed per head, V by
  a scale-free RMSNorm; the attention scale is 1 (the norms set the logits' size).
* Global (full-attention) layers have their own head_dim (``global_head_dim``) and, with
  ``attention_k_eq_v``, their own KV heads (``num_global_key_value_heads``) and no
  v_proj: V is K's projection, V-normed and not rotated. transformers 5 saves these as
  ``per_layer_config`` (layer -> head_dim / num_key_value_heads); hub configs spell the
  two global keys. Their RoPE is "proportional": the first ``partial_rotary_factor`` of
  the frequency pairs rotate over the whole head, the rest by 0.
* Per-layer embeddings (``hidden_size_per_layer_input`` P > 0): a second token table
  [vocab_size_per_layer_input, layers * P] (x sqrt(P)) plus a projection of the scaled
  token embedding (x hidden^-0.5, RMSNorm over P), summed and x 2^-0.5, give each layer
  a [batch, seq, P] input; after its MLP the layer adds
  norm(per_layer_projection(act(per_layer_input_gate(h)) * input)).
* Every layer's output is multiplied by its ``layer_scalar`` (a checkpoint tensor).
* KV sharing: the last ``num_kv_shared_layers`` layers have no K/V projections and no
  cache; each attends to the present K/V of the last earlier layer of its type, under
  its type's mask. With ``use_double_wide_mlp`` their MLPs are twice as wide.
* ``final_logit_softcapping`` caps the logits (tanh).
* ``enable_moe_block`` (the 26B-A4B checkpoint): beside the dense MLP each layer runs a
  top-``top_k_experts`` mixture of ``num_experts`` GeGLU experts on the layer's residual
  (routed on its scale-free norm x ``router.scale`` / sqrt(hidden), weights renormalized
  then x ``per_expert_scale``; experts stacked as the checkpoint stores them); the two
  branches are normed and summed before the post-feed-forward norm.

Graph I/O: each caching layer's past/present has its own kv heads and head_dim; a
sharing layer has none (onnxruntime-genai's ``gemma4_text`` reads each layer's shape
from the inputs and skips the missing ones). A sharing layer reads the producer's
present cut to the attention mask's length, since genai may share a max-length buffer
between past and present.

Bidirectional attention over all tokens is refused up front.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.attention_mask import causal_padding_mask, token_blocks
from mobius.components.causal_transformer import CausalLM, CausalTransformer, scalar
from mobius.components.decoder_layer import SandwichNormDecoderLayer
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.moe import ExpertFn, combine_experts, routing_weights
from mobius.components.per_layer_embedding import PerLayerEmbeddings, PerLayerInputBranch
from mobius.components.rms_norm import RMSNorm, UnitRMSNorm
from mobius.components.shared_kv_attention import (LayerPlan, SharedKVAttention,
                                                   checked_sharing, valid_cache)
from mobius.components.weight import Weight
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options, reject
from mobius.config.rope import RopeConfig, RopeKeys
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.mixtral import moe_int
from mobius.tasks.causal_lm import PAST
from mobius.tiny.bases import COMMON

SLIDING, FULL = "sliding_attention", "full_attention"
#: transformers' Gemma4TextConfig default RoPE per layer type
_ROPES = {SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
          FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                 "rope_theta": 1_000_000.0}}
#: transformers' default layer pattern: every 6th layer global
_PATTERN = 6


@dataclasses.dataclass(frozen=True)
class Gemma4Options(RopeKeys):
    """The switches, with transformers' Gemma4TextConfig defaults."""

    final_logit_softcapping: float | None = None
    hidden_size_per_layer_input: int = 256
    vocab_size_per_layer_input: int = 262_144
    attention_k_eq_v: bool = False
    num_kv_shared_layers: int = 0
    use_double_wide_mlp: bool = False
    global_head_dim: int = 512
    num_global_key_value_heads: int | None = None
    per_layer_config: dict | None = None
    enable_moe_block: bool = False
    num_experts: int | None = None
    top_k_experts: int | None = None
    moe_intermediate_size: int | None = None
    use_bidirectional_attention: str | None = None


def layer_plans(options: Gemma4Options, layer_types, kv_heads: int,
                head_dim: int) -> list[LayerPlan]:
    """Each layer's geometry (per_layer_config, else the global keys on full layers),
    checked: one shape per layer type, a caching layer of each type to share."""
    overrides = _per_layer_overrides(options, layer_types)
    first_shared = len(layer_types) - options.num_kv_shared_layers
    plans = []
    for i, kind in enumerate(layer_types):
        own = overrides.get(i, {})
        plans.append(LayerPlan(kind, own.get("num_key_value_heads", kv_heads),
                               own.get("head_dim", head_dim), i >= first_shared))
    for kind in sorted(set(layer_types)):
        if len({(p.kv_heads, p.head_dim) for p in plans if p.kind == kind}) > 1:
            raise ConfigError(f"config.json: gemma4: {kind} layers of different shapes are "
                              f"not supported")
    return checked_sharing(plans, options.num_kv_shared_layers, "gemma4")


def _per_layer_overrides(options: Gemma4Options, layer_types) -> dict[int, dict[str, int]]:
    if options.per_layer_config is None:
        own = {"head_dim": options.global_head_dim}
        if options.attention_k_eq_v and options.num_global_key_value_heads is not None:
            own["num_key_value_heads"] = options.num_global_key_value_heads
        return {i: own for i, kind in enumerate(layer_types) if kind == FULL}
    overrides = {}
    for key, values in options.per_layer_config.items():
        if not (str(key).isdigit() and int(key) < len(layer_types)
                and isinstance(values, dict)
                and set(values) <= {"head_dim", "num_key_value_heads"}
                and all(isinstance(v, int) and v > 0 for v in values.values())):
            raise ConfigError(f"config.json: gemma4: per_layer_config entry {key!r}: "
                              f"{values!r} is not supported (positive head_dim / "
                              f"num_key_value_heads of a layer)")
        overrides[int(key)] = values
    return overrides


class Gemma4Router(nn.Module):
    """Dense top-k routing [..., E] (float32) of norm(x) * scale / sqrt(hidden)."""

    def __init__(self, hidden: int, experts: int, top_k: int, eps: float):
        super().__init__()
        self.hidden, self.top_k = hidden, top_k
        self.norm = UnitRMSNorm(hidden, eps)
        self.proj = Linear(hidden, experts)
        self.scale = Weight([hidden])
        self.per_expert_scale = Weight([experts])  # applied to each expert's output

    def forward(self, op, x):
        x = op.Mul(op.Mul(self.norm(op, x), self.scale), scalar(op, self.hidden**-0.5))
        return routing_weights(op, self.proj(op, x), self.top_k, True, get_build_dtype())


class Gemma4Experts(nn.Module):
    """Experts stacked as the checkpoint stores them: gate_up_proj [E, 2I, H] (gate rows,
    then up rows), down_proj [E, H, I]; expert e is down(act(gate x) * up x)."""

    def __init__(self, hidden: int, inter: int, experts: int, activation: str):
        super().__init__()
        self.num_experts, self.activation = experts, activation
        self.gate_up_proj = Weight([experts, 2 * inter, hidden])
        self.down_proj = Weight([experts, hidden, inter])

    def forward(self, op, x, routing, scale):
        """sum_e routing[..., e] * scale[e] * expert_e(x), each expert on its tokens."""
        experts = [self._expert(e, scale) for e in range(self.num_experts)]
        return combine_experts(op, x, routing, experts, get_build_dtype())

    def _expert(self, e: int, scale) -> ExpertFn:
        def weight(op, stacked, index):
            return op.Transpose(op.Gather(stacked, index, axis=0), perm=[1, 0])

        def run(op, rows):
            index = op.Constant(value_int=e)
            gate, up = op.Split(op.MatMul(rows, weight(op, self.gate_up_proj, index)),
                                axis=-1, num_outputs=2, _outputs=2)
            hidden = op.Mul(apply_activation(op, gate, self.activation), up)
            out = op.MatMul(hidden, weight(op, self.down_proj, index))
            return op.Mul(out, op.Gather(scale, index, axis=0))

        return run


def moe_sizes(options: Gemma4Options) -> tuple[int, int, int]:
    """(experts, top_k, expert size), checked."""
    experts = moe_int("num_experts", options.num_experts)
    top_k = moe_int("top_k_experts", options.top_k_experts)
    if top_k > experts:
        raise ConfigError(f"config.json: top_k_experts ({top_k}) exceeds num_experts "
                          f"({experts})")
    return experts, top_k, moe_int("moe_intermediate_size", options.moe_intermediate_size)


class Gemma4DecoderLayer(SandwichNormDecoderLayer, PerLayerInputBranch):
    """Sandwich norms (a MoE branch beside the MLP), then the per-layer-input branch,
    then x layer_scalar."""

    def __init__(self, config: ArchitectureConfig, plan: LayerPlan, rope: RopeConfig):
        options = config.options
        wide = 2 if options.use_double_wide_mlp and plan.shared else 1
        norms = [RMSNorm(config.hidden_size, config.rms_norm_eps) for _ in range(4)]
        k_eq_v = options.attention_k_eq_v and plan.kind == FULL
        super().__init__(SharedKVAttention(config, plan, rope, values_from_keys=k_eq_v),
                         GatedMLP(config.hidden_size, config.intermediate_size * wide,
                                  config.hidden_act), *norms)
        self.layer_scalar = Weight([1])
        size = options.hidden_size_per_layer_input
        if size:
            self.add_per_layer_input_branch(config.hidden_size, size, config.rms_norm_eps,
                                            config.hidden_act)
        self.router = None
        if options.enable_moe_block:
            experts, top_k, inter = moe_sizes(options)
            self.router = Gemma4Router(config.hidden_size, experts, top_k, config.rms_norm_eps)
            self.experts = Gemma4Experts(config.hidden_size, inter, experts, config.hidden_act)
            for name in ("post_feedforward_layernorm_1", "post_feedforward_layernorm_2",
                         "pre_feedforward_layernorm_2"):
                setattr(self, name, RMSNorm(config.hidden_size, config.rms_norm_eps))

    def feed_forward(self, op, hidden, pre_mlp):
        """The MLP's output, plus (MoE) the experts' on the same residual, each normed."""
        out = self.mlp(op, pre_mlp(op, hidden))
        if self.router is None:
            return out
        moe = self.experts(op, self.pre_feedforward_layernorm_2(op, hidden),
                           self.router(op, hidden), self.router.per_expert_scale)
        return op.Add(self.post_feedforward_layernorm_1(op, out),
                      self.post_feedforward_layernorm_2(op, moe))

    def forward(self, op, hidden, cos, sin, mask, per_layer_input, past=(), shared=None):
        pre_attn, post_attn, pre_mlp, post_mlp = (getattr(self, n) for n in self.names)
        attn, present = self.self_attn(op, pre_attn(op, hidden), cos, sin, mask, *past,
                                       shared=shared)
        hidden = op.Add(hidden, post_attn(op, attn))
        hidden = op.Add(hidden, post_mlp(op, self.feed_forward(op, hidden, pre_mlp)))
        if per_layer_input is not None:
            hidden = op.Add(hidden, self.per_layer_branch(op, hidden, per_layer_input))
        return op.Mul(hidden, self.layer_scalar), present


class Gemma4TextModel(CausalTransformer, PerLayerEmbeddings):
    """Embedding (x sqrt(hidden)), per-layer inputs, layers with KV sharing, final norm."""

    def __init__(self, config: ArchitectureConfig):
        plans = layer_plans(config.options, config.layer_types, config.num_key_value_heads,
                            config.head_dim)
        ropes = {kind: _rope(config, kind, next(p for p in plans if p.kind == kind))
                 for kind in dict.fromkeys(config.layer_types)}
        layers = [Gemma4DecoderLayer(config, plan, ropes[plan.kind]) for plan in plans]
        super().__init__(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                         ropes=ropes, layer_rope_kinds=list(config.layer_types),
                         embed_scale=config.hidden_size**0.5)
        self.plans = plans
        size = self.per_layer_size = config.options.hidden_size_per_layer_input
        if size:
            self.add_per_layer_embeddings(config.num_hidden_layers, size,
                                          config.options.vocab_size_per_layer_input,
                                          config.hidden_size, config.rms_norm_eps)
        #: a multimodal package's media token ids (image, video, audio)
        self.media_token_ids: tuple[int, ...] = ()
        #: image blocks attend to themselves whole on every layer, past the sliding
        #: window too (Gemma 4 Unified, as transformers' forward masks them)
        self.whole_blocks = False

    def multimodal_per_layer_inputs(self, op, input_ids, inputs_embeds):
        """Per-layer inputs beside merged embeddings (transformers' multimodal model): a
        media token reads the pad token's table row; the projection reads the merged row."""
        media = None
        for token in self.media_token_ids:
            hit = op.Equal(input_ids, op.Constant(value_int=token))
            media = hit if media is None else op.Or(media, hit)
        ids = op.Where(media, op.Constant(value_int=self.config.pad_token_id or 0), input_ids)
        return self.per_layer_inputs(op, ids, inputs_embeds)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values,
                inputs_embeds=None):
        """``inputs_embeds`` (a multimodal package's merged, scaled embeddings) replaces the
        lookup; input_ids then feed the per-layer inputs and the image blocks, which sliding
        layers let attend both ways (``block_token_id``)."""
        config = self.config
        if inputs_embeds is None:
            hidden = op.Mul(self.embed_tokens(op, input_ids), scalar(op, self.embed_scale))
            per_layer = (self.per_layer_inputs(op, input_ids, hidden) if self.per_layer_size
                         else None)
        else:
            hidden = inputs_embeds
            per_layer = (self.multimodal_per_layer_inputs(op, input_ids, hidden)
                         if self.per_layer_size else None)
        blocks = (token_blocks(op, input_ids, self.block_token_id)
                  if self.block_token_id is not None else None)
        rotary = {kind: getattr(self, f"rotary_emb_{kind}")(op, position_ids)
                  for kind in self.rope_kinds}
        masks, stored, presents = {}, {}, []
        tokens = input_ids if inputs_embeds is None else hidden
        for i, (layer, plan) in enumerate(zip(self.layers, self.plans)):
            window = config.layer_sliding_window(i)
            if window not in masks:
                masks[window] = causal_padding_mask(
                    op, tokens, attention_mask, get_build_dtype(), window,
                    blocks if window or self.whole_blocks else None,
                    whole_blocks=self.whole_blocks)
            layer_input = (None if per_layer is None
                           else op.Gather(per_layer, op.Constant(value_int=i), axis=2))
            hidden, present = layer(op, hidden, *rotary[plan.kind], masks[window], layer_input,
                                    past_key_values[i],
                                    shared=stored[plan.kind] if plan.shared else None)
            if not plan.shared:
                stored[plan.kind] = tuple(valid_cache(op, x, attention_mask) for x in present)
            presents.append(present)
        return self.norm(op, hidden), presents


def _rope(config: ArchitectureConfig, kind: str, plan: LayerPlan) -> RopeConfig:
    params = (config.options.rope_parameters or _ROPES).get(kind) or _ROPES[kind]
    raw = config.options.rope_raw(config.max_position_embeddings, rope_parameters=params)
    return RopeConfig.from_hf(raw, plan.head_dim)


class Gemma4ForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        model = Gemma4TextModel(config)
        super().__init__(config, model,
                         final_logit_softcap=config.options.final_logit_softcapping)
        #: the task's cache map: a global layer's own KV shape, none on a sharing layer
        self.recurrent_states = {
            i: () if plan.shared else tuple((name, (plan.kv_heads, PAST, plan.head_dim))
                                             for name in ("key", "value"))
            for i, plan in enumerate(model.plans)
            if plan.shared or (plan.kv_heads, plan.head_dim) != (config.num_key_value_heads,
                                                                  config.head_dim)}


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """transformers' derived defaults: layer_types (every 6th global, the last global),
    RoPE per layer type, no per-layer inputs for a null size."""
    out = dict(raw)
    layers = out.get("num_hidden_layers", 30)
    if not out.get("layer_types") and isinstance(layers, int):
        out["layer_types"] = [FULL if (i + 1) % _PATTERN == 0 else SLIDING
                              for i in range(layers)]
    if isinstance(out.get("layer_types"), list) and out["layer_types"]:
        out["layer_types"] = [*out["layer_types"][:-1], FULL]
    if out.get("rope_parameters") is None:
        out["rope_parameters"] = _ROPES
    if "hidden_size_per_layer_input" in out and not out["hidden_size_per_layer_input"]:
        out["hidden_size_per_layer_input"] = 0
    return out


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The checks a build needs before any weight is read (the layer plans among them);
    the model-level RoPE is the sliding layers' (the head_dim config.json names)."""
    options = read_options(Gemma4Options, raw)
    if options.enable_moe_block:
        moe_sizes(options)
    reject(options.use_bidirectional_attention == "all", "gemma4",
           "use_bidirectional_attention 'all' (an encoder, not a decoder)")
    layers = raw.get("num_hidden_layers")
    if not (isinstance(layers, int) and 0 <= options.num_kv_shared_layers < layers):
        raise ConfigError(f"config.json: gemma4: num_kv_shared_layers "
                          f"{options.num_kv_shared_layers} must be below num_hidden_layers")
    heads = positive_int("num_attention_heads", raw.get("num_attention_heads"))
    head_dim = positive_int("head_dim", raw.get("head_dim")
                            or positive_int("hidden_size", raw.get("hidden_size")) // heads)
    kinds = raw.get("layer_types")
    if not (isinstance(kinds, list) and len(kinds) == layers and set(kinds) <= {SLIDING, FULL}):
        raise ConfigError(f"config.json: gemma4: layer_types must list {layers} of "
                          f"{SLIDING} / {FULL}, got {kinds!r}")
    layer_plans(options, raw["layer_types"], raw.get("num_key_value_heads") or heads, head_dim)
    params = (options.rope_parameters or _ROPES).get(SLIDING) or _ROPES[SLIDING]
    return {"hidden_act": raw.get("hidden_activation") or "gelu_pytorch_tanh",
            "tie_word_embeddings": raw.get("tie_word_embeddings", True),
            "rope": RopeConfig.from_hf({**raw, "rope_parameters": params}, head_dim)}


FAMILY = ModelFamily(
    name="gemma4_text", model_types=("gemma4_text",), architectures=("Gemma4ForCausalLM",),
    module=Gemma4ForCausalLM, tiny_preset="tiny-gemma4", options=Gemma4Options,
    normalize_raw=normalize, config_overrides=_overrides, cohorts=("genai", "every-dtype"),
    attention_traits=("kv_sharing", "unscaled_attention"),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # sliding, global, sliding, sliding, global; the last two share the K/V of layers 2
    # and 1 (double-wide MLPs of 344); global layers: heads of 32, one KV head, V = K's
    # projection, proportional RoPE on a quarter; per-layer inputs of 8; window 6.
    "tiny-gemma4": {
        **COMMON, "model_type": "gemma4_text", "architectures": ["Gemma4ForCausalLM"],
        "num_hidden_layers": 5, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True, "sliding_window": 6,
        "layer_types": [SLIDING, FULL, SLIDING, SLIDING, FULL],
        "rope_parameters": {SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
                            FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 1000000.0}},
        "global_head_dim": 32, "num_global_key_value_heads": 1, "attention_k_eq_v": True,
        "num_kv_shared_layers": 2, "use_double_wide_mlp": True,
        "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 1031,
        "final_logit_softcapping": 10.0,
    },
}
