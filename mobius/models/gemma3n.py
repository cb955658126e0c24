"""Gemma 3n text decoder (Gemma3nForCausalLM, model_type "gemma3n_text"; and the
multimodal checkpoints, Gemma3nForConditionalGeneration "gemma3n", built text-only).

Gemma 4's KV-sharing attention and per-layer embeddings (components it shares with
mobius/models/gemma4.py) in a residual widened by AltUp:

* Attention: per-head RMSNorm on Q and K, a scale-free one on V, scale 1; sliding and
  full layers (``layer_types``, default every 5th full) with a RoPE per type
  (``rope_parameters``; hub configs spell ``rope_theta`` / ``rope_local_base_freq``).
* KV sharing (mobius/components/shared_kv_attention.py): the last
  ``num_kv_shared_layers`` layers have no cache; each reads the present K/V of the last
  earlier layer of its type; the K/V projections released checkpoints keep on them are
  declared unread, as transformers skips them.
* Per-layer embeddings (mobius/components/per_layer_embedding.py), always on; token ids
  at or above ``vocab_size_per_layer_input`` (the multimodal ids) read its row 0.
* AltUp (mobius/components/altup.py): ``altup_num_inputs`` streams; each layer predicts
  them, runs on stream ``altup_active_idx`` and corrects them; the corrected active
  stream (x ``correct_output_scale`` if ``altup_correct_scale``) drives the per-layer
  input branch, whose output is added to every stream but the first.
* Each layer: LAuReL (mobius/components/laurel.py) beside attention, the two averaged
  (x 2^-0.5); an MLP of the layer's own width (``intermediate_size`` may be a list) whose
  gate is gaussian top-k sparse where ``activation_sparsity_pattern`` is above 0
  (mobius/components/gaussian_topk.py; transformers' default: 0.95 on the first 10 of more
  than 10 layers).
* ``final_logit_softcapping`` (30 by default) caps the logits.

The multimodal checkpoint: the decoder from the nested ``text_config`` under
``model.language_model.*``; the vision and audio towers and their embedders
(``model.vision_tower``, ``model.audio_tower``, ``model.embed_vision``,
``model.embed_audio``) are declared unread, their config sections left out of the
plausibility check: the package is the text decoder only.

onnxruntime-genai 0.18 has no gemma3n type; genai_config names its generic "decoder",
which runs the package although the sharing layers have no past_key_values inputs
(dense_families_genai_test: token for token with transformers, default and cpu EP
packages; its gemma3_text type, tried by hand, decodes the same tokens).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.altup import AltUp, collapse_streams, expand_streams, stream
from mobius.components.attention_mask import causal_padding_mask
from mobius.components.causal_transformer import CausalLM, CausalTransformer, scalar
from mobius.components.decoder_layer import SandwichNormDecoderLayer
from mobius.components.laurel import LaurelBlock
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.per_layer_embedding import PerLayerEmbeddings, PerLayerInputBranch
from mobius.components.rms_norm import RMSNorm
from mobius.components.shared_kv_attention import (LayerPlan, SharedKVAttention,
                                                   checked_sharing, valid_cache)
from mobius.config.architecture import ArchitectureConfig
from mobius.config.fields import positive_int
from mobius.config.options import read_options
from mobius.config.rope import RopeConfig, RopeKeys
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.models.family import ModelFamily
from mobius.models.gemma4 import FULL, SLIDING
from mobius.tiny.bases import COMMON
from mobius.weights.attach import IgnoredTensors
from mobius.weights.dtypes import numpy_dtype

#: transformers' Gemma3nTextConfig: every 5th layer full; RoPE bases per layer type
_PATTERN = 5
_THETAS = {FULL: 1_000_000.0, SLIDING: 10_000.0}
#: transformers' default sparsity: the first 10 layers of a deeper model
_SPARSE_LAYERS, _SPARSITY = 10, 0.95


@dataclasses.dataclass(frozen=True)
class Gemma3nOptions(RopeKeys):
    """The switches, with transformers' Gemma3nTextConfig defaults (the lists filled per
    layer by ``normalize``)."""

    final_logit_softcapping: float = 30.0
    hidden_size_per_layer_input: int = 256
    vocab_size_per_layer_input: int = 262_144
    altup_active_idx: int = 0
    altup_correct_scale: bool = True
    altup_num_inputs: int = 4
    num_kv_shared_layers: int = 15
    laurel_rank: int = 64
    activation_sparsity_pattern: tuple[float, ...] = ()
    #: ``intermediate_size`` per layer (normalize: config.json may give one or a list)
    intermediate_sizes: tuple[int, ...] = ()


def layer_plans(options: Gemma3nOptions, layer_types, kv_heads: int,
                head_dim: int) -> list[LayerPlan]:
    """One geometry for every layer; the last num_kv_shared_layers share."""
    first_shared = len(layer_types) - options.num_kv_shared_layers
    plans = [LayerPlan(kind, kv_heads, head_dim, i >= first_shared)
             for i, kind in enumerate(layer_types)]
    return checked_sharing(plans, options.num_kv_shared_layers, "gemma3n")


class Gemma3nDecoderLayer(SandwichNormDecoderLayer, PerLayerInputBranch):
    """AltUp predict -> sandwich-normed attention beside LAuReL -> MLP -> AltUp correct
    -> the per-layer input branch onto streams 1..N-1."""

    def __init__(self, config: ArchitectureConfig, index: int, plan: LayerPlan,
                 rope: RopeConfig):
        options, hidden, eps = config.options, config.hidden_size, config.rms_norm_eps
        mlp = GatedMLP(hidden, options.intermediate_sizes[index], config.hidden_act,
                       activation_sparsity=options.activation_sparsity_pattern[index])
        super().__init__(SharedKVAttention(config, plan, rope), mlp,
                         *(RMSNorm(hidden, eps) for _ in range(4)))
        self.altup = AltUp(hidden, options.altup_num_inputs, options.altup_active_idx, eps,
                           options.altup_correct_scale)
        self.laurel = LaurelBlock(hidden, options.laurel_rank, eps)
        self.add_per_layer_input_branch(hidden, options.hidden_size_per_layer_input, eps,
                                        config.hidden_act)

    def _not_first(self, op, branch):
        """[batch, seq, hidden] -> [.., hidden, N], zero on stream 0."""
        count = self.altup.num_inputs
        mask = np.array([0.0] + [1.0] * (count - 1), dtype=numpy_dtype(get_build_dtype()))
        return op.Mul(op.Unsqueeze(branch, op.Constant(value_ints=[-1])),
                      op.Constant(value=ir.tensor(mask)))

    def forward(self, op, streams, cos, sin, mask, per_layer_input, past=(), shared=None):
        pre_attn, post_attn, pre_mlp, post_mlp = (getattr(self, n) for n in self.names)
        predictions = self.altup.predict(op, streams)
        active = stream(op, predictions, self.altup.active)
        normed = pre_attn(op, active)
        attn, present = self.self_attn(op, normed, cos, sin, mask, *past, shared=shared)
        hidden = op.Add(active, post_attn(op, attn))
        hidden = op.Mul(op.Add(hidden, self.laurel(op, normed)), scalar(op, 0.5**0.5))
        hidden = op.Add(hidden, post_mlp(op, self.mlp(op, pre_mlp(op, hidden))))
        corrected = self.altup.correct(op, predictions, hidden)
        first = self.altup(op, stream(op, corrected, self.altup.active))
        branch = self.per_layer_branch(op, first, per_layer_input)
        return op.Add(corrected, self._not_first(op, branch)), present


class Gemma3nTextModel(CausalTransformer, PerLayerEmbeddings):
    """Embedding (x sqrt(hidden)) and per-layer inputs, the AltUp streams through the
    layers (with KV sharing), collapsed, final norm."""

    def __init__(self, config: ArchitectureConfig):
        options = config.options
        plans = layer_plans(options, config.layer_types, config.num_key_value_heads,
                            config.head_dim)
        ropes = {kind: _rope(config, kind) for kind in dict.fromkeys(config.layer_types)}
        layers = [Gemma3nDecoderLayer(config, i, plan, ropes[plan.kind])
                  for i, plan in enumerate(plans)]
        super().__init__(config, layers, RMSNorm(config.hidden_size, config.rms_norm_eps),
                         ropes=ropes, layer_rope_kinds=list(config.layer_types),
                         embed_scale=config.hidden_size**0.5)
        self.plans = plans
        table = options.vocab_size_per_layer_input
        self.add_per_layer_embeddings(config.num_hidden_layers,
                                      options.hidden_size_per_layer_input, table,
                                      config.hidden_size, config.rms_norm_eps,
                                      clamp_ids=table if table < config.vocab_size else None)
        extra = options.altup_num_inputs - 1
        self.altup_projections = nn.ModuleList(
            [Linear(config.hidden_size, config.hidden_size) for _ in range(extra)])
        self.altup_unembed_projections = nn.ModuleList(
            [Linear(config.hidden_size, config.hidden_size) for _ in range(extra)])

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values):
        config = self.config
        hidden = op.Mul(self.embed_tokens(op, input_ids), scalar(op, self.embed_scale))
        per_layer = self.per_layer_inputs(op, input_ids, hidden)
        streams = expand_streams(op, hidden, list(self.altup_projections))
        rotary = {kind: getattr(self, f"rotary_emb_{kind}")(op, position_ids)
                  for kind in self.rope_kinds}
        masks, stored, presents = {}, {}, []
        for i, (layer, plan) in enumerate(zip(self.layers, self.plans)):
            window = config.layer_sliding_window(i)
            if window not in masks:
                masks[window] = causal_padding_mask(op, input_ids, attention_mask,
                                                    get_build_dtype(), window)
            layer_input = op.Gather(per_layer, op.Constant(value_int=i), axis=2)
            streams, present = layer(op, streams, *rotary[plan.kind], masks[window],
                                     layer_input, past_key_values[i],
                                     shared=stored[plan.kind] if plan.shared else None)
            if not plan.shared:
                stored[plan.kind] = tuple(valid_cache(op, x, attention_mask) for x in present)
            presents.append(present)
        hidden = collapse_streams(op, streams, list(self.altup_unembed_projections))
        return self.norm(op, hidden), presents


def _rope(config: ArchitectureConfig, kind: str) -> RopeConfig:
    params = config.options.rope_parameters[kind]
    raw = config.options.rope_raw(config.max_position_embeddings, rope_parameters=params)
    return RopeConfig.from_hf(raw, config.head_dim)


class Gemma3nForCausalLM(CausalLM):
    def __init__(self, config: ArchitectureConfig):
        model = Gemma3nTextModel(config)
        super().__init__(config, model,
                         final_logit_softcap=config.options.final_logit_softcapping)
        #: the task's cache map: none on a sharing layer
        self.recurrent_states = {i: () for i, plan in enumerate(model.plans) if plan.shared}


def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A multimodal config's ``text_config`` at the top level; transformers' derived
    defaults: layer_types, RoPE per layer type, the per-layer MLP widths and sparsities."""
    if raw.get("model_type") == "gemma3n":
        raw = _text_config(raw)
    out = dict(raw)
    layers = out.get("num_hidden_layers", 35)
    if not isinstance(layers, int):
        return out
    if not out.get("layer_types"):
        out["layer_types"] = [FULL if (i + 1) % _PATTERN == 0 else SLIDING
                              for i in range(layers)]
    out["rope_parameters"] = _rope_parameters(out)
    sizes = out.get("intermediate_size", 16_384)
    if isinstance(sizes, list):
        out["intermediate_sizes"] = sizes
        out["intermediate_size"] = sizes[0] if sizes else None
    else:
        out["intermediate_sizes"] = [sizes] * layers
    if out.get("activation_sparsity_pattern") is None:
        sparse = _SPARSE_LAYERS if layers > _SPARSE_LAYERS else 0
        out["activation_sparsity_pattern"] = [_SPARSITY] * sparse + [0.0] * (layers - sparse)
    return out


def _rope_parameters(raw: Mapping[str, Any]) -> dict[str, dict]:
    """rope_parameters by layer type; hub configs' rope_theta (full layers, with any
    rope_scaling) and rope_local_base_freq (sliding layers) where it names none."""
    given = raw.get("rope_parameters")
    given = given if isinstance(given, dict) else {}
    out = {}
    for kind, key in ((FULL, "rope_theta"), (SLIDING, "rope_local_base_freq")):
        params = dict(given.get(kind) or {"rope_type": "default"})
        if kind == FULL and isinstance(raw.get("rope_scaling"), dict) and kind not in given:
            params.update(raw["rope_scaling"])
        params.setdefault("rope_theta", raw.get(key) or _THETAS[kind])
        out[kind] = params
    return out


def _checked_lists(options: Gemma3nOptions, layers: int) -> None:
    for key, values in (("intermediate_size", options.intermediate_sizes),
                        ("activation_sparsity_pattern", options.activation_sparsity_pattern)):
        if len(values) != layers:
            raise ConfigError(f"config.json: gemma3n: {key} lists {len(values)} values for "
                              f"{layers} layers")
    if not all(isinstance(s, int) and s > 0 for s in options.intermediate_sizes):
        raise ConfigError(f"config.json: gemma3n: intermediate_size must be positive integers, "
                          f"got {list(options.intermediate_sizes)}")
    if not all(0.0 <= s < 1.0 for s in options.activation_sparsity_pattern):
        raise ConfigError(f"config.json: gemma3n: activation_sparsity_pattern must lie in "
                          f"[0, 1), got {list(options.activation_sparsity_pattern)}")


def _overrides(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The checks a build needs before any weight is read; the model-level RoPE is the
    sliding layers'."""
    options = read_options(Gemma3nOptions, raw)
    layers = positive_int("num_hidden_layers", raw.get("num_hidden_layers"))
    _checked_lists(options, layers)
    for key in ("altup_num_inputs", "laurel_rank", "hidden_size_per_layer_input",
                "vocab_size_per_layer_input"):
        positive_int(key, getattr(options, key))
    if not 0 <= options.altup_active_idx < options.altup_num_inputs:
        raise ConfigError(f"config.json: gemma3n: altup_active_idx {options.altup_active_idx} "
                          f"is not one of the {options.altup_num_inputs} AltUp streams")
    if not 0 <= options.num_kv_shared_layers < layers:
        raise ConfigError(f"config.json: gemma3n: num_kv_shared_layers "
                          f"{options.num_kv_shared_layers} must be below num_hidden_layers")
    kinds = raw.get("layer_types")
    if not (isinstance(kinds, list) and len(kinds) == layers and set(kinds) <= {SLIDING, FULL}):
        raise ConfigError(f"config.json: gemma3n: layer_types must list {layers} of "
                          f"{SLIDING} / {FULL}, got {kinds!r}")
    heads = positive_int("num_attention_heads", raw.get("num_attention_heads"))
    head_dim = positive_int("head_dim", raw.get("head_dim")
                            or positive_int("hidden_size", raw.get("hidden_size")) // heads)
    layer_plans(options, kinds, raw.get("num_key_value_heads") or heads, head_dim)
    return {"hidden_act": raw.get("hidden_activation") or "gelu_pytorch_tanh",
            "tie_word_embeddings": raw.get("tie_word_embeddings", True),
            "rope": RopeConfig.from_hf({**raw, "rope_parameters": options.rope_parameters[SLIDING]},
                                       head_dim)}


def unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    """A multimodal checkpoint's towers and their embedders; the K/V projections and norms
    that released checkpoints keep on sharing layers (transformers skips them too); AltUp's
    output scale when altup_correct_scale is off."""
    out = [IgnoredTensors(rf"model\.{part}\..*", f"{part} (the package is the text decoder "
                                                 f"only)")
           for part in ("vision_tower", "audio_tower", "embed_vision", "embed_audio")]
    layers, shared = config.num_hidden_layers, config.options.num_kv_shared_layers
    if shared:
        sharing = "|".join(str(i) for i in range(layers - shared, layers))
        out.append(IgnoredTensors(rf"(.*\.)?layers\.({sharing})\.self_attn\."
                                  rf"(k_proj|v_proj|k_norm|v_norm)\..*",
                                  "K/V of a sharing layer (it reads an earlier layer's)"))
    if not config.options.altup_correct_scale:
        out.append(IgnoredTensors(r".*\.altup\.correct_output_scale",
                                  "AltUp's output scale (altup_correct_scale is false)"))
    return tuple(out)


def _text_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``text_config`` at the top level; tie_word_embeddings the outer config's."""
    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise ConfigError("config.json: gemma3n: text_config (the decoder's config) is missing")
    tie = raw.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
    return {**text, "tie_word_embeddings": tie, "model_type": "gemma3n",
            "architectures": list(raw.get("architectures") or [])}


FAMILY = ModelFamily(
    name="gemma3n", model_types=("gemma3n_text", "gemma3n"),
    architectures=("Gemma3nForCausalLM", "Gemma3nForConditionalGeneration"),
    module=Gemma3nForCausalLM, tiny_preset="tiny-gemma3n", options=Gemma3nOptions,
    normalize_raw=normalize, config_overrides=_overrides,
    attention_traits=("kv_sharing", "unscaled_attention"), ignored_tensors=unread,
    checkpoint_aliases=(("model.", ("model.", "model.language_model.")),),
    unread_config=("vision_config", "audio_config"), cohorts=("genai",),
)

#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    # sliding, full, sliding, sliding, full; the last two share the K/V of layers 2 and 1;
    # MLPs of 172 .. 124, the first two gaussian top-k sparse (0.95, 0.6); 3 AltUp streams,
    # stream 1 active; LAuReL rank 12; per-layer inputs of 8 from a table of 1000 rows
    # (ids 1000.. read row 0); window 6; logits capped at 10. (The multimodal layout needs
    # timm for transformers to write it: gemma3n_test renames this one's tensors.)
    "tiny-gemma3n": {
        **COMMON, "model_type": "gemma3n_text", "architectures": ["Gemma3nForCausalLM"],
        "num_hidden_layers": 5, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": True, "sliding_window": 6,
        "layer_types": [SLIDING, FULL, SLIDING, SLIDING, FULL],
        "rope_parameters": {SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
                            FULL: {"rope_type": "default", "rope_theta": 1000000.0}},
        "intermediate_size": [172, 160, 148, 136, 124],
        "activation_sparsity_pattern": [0.95, 0.6, 0.0, 0.0, 0.0],
        "num_kv_shared_layers": 2, "altup_num_inputs": 3, "altup_active_idx": 1,
        "laurel_rank": 12, "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": 1000,
        "final_logit_softcapping": 10.0,
    },
}
