"""The decoder body of hybrids whose layers are attention or recurrent (Mamba2, ...).

``HybridCausalTransformer`` is ``CausalTransformer`` (embedding, RoPE tables,
final norm) except for the masks: attention layers get the additive causal
mask of their window, recurrent layers the 0/1 padding mask of the current
positions [batch, seq, 1] (:func:`current_padding`), which is all they need.
A layer is called as ``layer(op, hidden, cos, sin, mask, *its past tensors)``
and returns ``(hidden, *its present tensors)``. A ``parallel`` layer (attention
beside a recurrent mixer, Falcon-H1) gets ``mask = (causal mask, padding)``.
"""

from __future__ import annotations

from typing import Collection, Sequence

from onnxscript import nn

from mobius.components.attention_mask import causal_padding_mask
from mobius.components.causal_transformer import CausalTransformer, scalar
from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype

INT64_MAX = 2**63 - 1


def current_padding(op, tokens, attention_mask):
    """attention_mask's last seq columns as [batch, seq, 1] in the build dtype."""
    seq = op.Shape(tokens, start=1, end=2)
    current = op.Slice(attention_mask, op.Neg(seq), op.Constant(value_ints=[INT64_MAX]),
                       op.Constant(value_ints=[1]))
    return op.Unsqueeze(op.Cast(current, to=get_build_dtype()), op.Constant(value_ints=[2]))


class HybridCausalTransformer(CausalTransformer):
    def __init__(self, config: ArchitectureConfig, layers: Sequence[nn.Module], norm: nn.Module,
                 recurrent: Collection[int], parallel: Collection[int] = (), **kwargs):
        """recurrent: the indices of the recurrent layers; parallel: those of the layers
        that both attend and recur; kwargs: CausalTransformer's."""
        super().__init__(config, layers, norm, **kwargs)
        self.recurrent, self.parallel = frozenset(recurrent), frozenset(parallel)

    def forward(self, op, input_ids, attention_mask, position_ids, past_key_values,
                inputs_embeds=None):
        embedding, layers, norm = (getattr(self, name) for name in self.attributes)
        hidden = embedding(op, input_ids) if inputs_embeds is None else inputs_embeds
        tokens = input_ids if inputs_embeds is None else inputs_embeds
        if self.embed_scale is not None:
            hidden = op.Mul(hidden, scalar(op, self.embed_scale))
        rotary = {kind: getattr(self, f"rotary_emb_{kind}")(op, position_ids)
                  for kind in self.rope_kinds if kind in self.layer_rope_kinds}
        masks, presents = {}, []

        def mask(key):
            if key not in masks:
                masks[key] = (current_padding(op, tokens, attention_mask) if key == "recurrent"
                              else causal_padding_mask(op, tokens, attention_mask,
                                                       get_build_dtype(), key))
            return masks[key]

        for i, layer in enumerate(layers):
            window = self.config.layer_sliding_window(i)
            layer_mask = ((mask(window), mask("recurrent")) if i in self.parallel
                          else mask("recurrent") if i in self.recurrent else mask(window))
            kind = self.layer_rope_kinds[i]
            cos, sin = rotary[kind] if kind is not None else (None, None)
            hidden, *present = layer(op, hidden, cos, sin, layer_mask, *past_key_values[i])
            presents.append(tuple(present))
        return norm(op, hidden), presents
