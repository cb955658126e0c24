"""Attention with cross-layer KV sharing (Gemma 3n, Gemma 4).

The last ``num_kv_shared_layers`` layers of such a model have no K/V projections and no
cache: each attends to the present K/V of the last earlier layer of its type (sliding or
full), under its own type's mask. ``LayerPlan`` says which layers share and their
geometry; the body keeps each caching layer's present cut by ``valid_cache`` and hands it
to ``SharedKVAttention`` of the sharing layers. Q and K are RMSNormed per head, V by a
scale-free RMSNorm, and the scale is 1 (the norms set the logits' size).
"""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.attention import scaled_dot_product_attention
from mobius.components.linear import Linear
from mobius.components.rms_norm import RMSNorm, UnitRMSNorm
from mobius.components.rotary import apply_rotary
from mobius.config.architecture import ArchitectureConfig
from mobius.config.rope import RopeConfig
from mobius.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    """One layer's attention geometry and KV source."""

    kind: str
    kv_heads: int
    head_dim: int
    shared: bool  # attends to an earlier layer's K/V, has none of its own


def checked_sharing(plans: list[LayerPlan], shared: int, family: str) -> list[LayerPlan]:
    """``plans``, once each layer type has a caching layer for its sharing layers to read
    (``shared``: num_kv_shared_layers, for the message)."""
    for kind in sorted({p.kind for p in plans}):
        if not any(p.kind == kind and not p.shared for p in plans):
            raise ConfigError(f"config.json: {family}: num_kv_shared_layers {shared} leaves "
                              f"no {kind} layer to share its K/V")
    return plans


def valid_cache(op, cache, attention_mask):
    """The cache's first total_sequence_length positions: a buffer genai shares between
    past and present is max-length."""
    total = op.Shape(attention_mask, start=1, end=2)
    return op.Slice(cache, op.Constant(value_ints=[0]), total, op.Constant(value_ints=[2]))


class SharedKVAttention(nn.Module):
    """Q/K/V-normed attention, scale 1; V from K's projection (``values_from_keys``); a
    sharing layer has only q_proj / q_norm / o_proj and attends to the K/V it is given."""

    def __init__(self, config: ArchitectureConfig, plan: LayerPlan, rope: RopeConfig,
                 values_from_keys: bool = False):
        super().__init__()
        hidden, heads, eps = config.hidden_size, config.num_attention_heads, config.rms_norm_eps
        self.num_heads, self.num_kv_heads, self.head_dim = heads, plan.kv_heads, plan.head_dim
        self.rotary_dim = rope.rotary_dim
        self.q_proj = Linear(hidden, heads * plan.head_dim, config.qkv_bias)
        self.q_norm = RMSNorm(plan.head_dim, eps)
        self.o_proj = Linear(heads * plan.head_dim, hidden, config.o_bias)
        self.v_norm = UnitRMSNorm(plan.head_dim, eps)
        self.k_proj = self.v_proj = None
        if not plan.shared:
            kv_size = plan.kv_heads * plan.head_dim
            self.k_proj = Linear(hidden, kv_size, config.qkv_bias)
            self.k_norm = RMSNorm(plan.head_dim, eps)
            if not values_from_keys:
                self.v_proj = Linear(hidden, kv_size, config.qkv_bias)

    def _heads(self, op, x, heads, norm):
        """[batch, seq, heads*dim] -> normed per head -> [batch, heads, seq, dim]."""
        x = norm(op, op.Reshape(x, op.Constant(value_ints=[0, 0, heads, self.head_dim])))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def _rotated(self, op, x, cos, sin):
        return apply_rotary(op, x, cos, sin, self.rotary_dim, self.head_dim)

    def forward(self, op, hidden, cos, sin, mask, past_key=None, past_value=None, shared=None):
        q = self._rotated(op, self._heads(op, self.q_proj(op, hidden), self.num_heads,
                                          self.q_norm), cos, sin)
        if shared is not None:
            (k, v), present = shared, ()
            attn, _, _ = scaled_dot_product_attention(op, q, k, v, mask, scale=1.0)
            if q.shape is not None:  # inference loses it behind the sliced cache: restated,
                attn.shape = q.shape.copy()  # so shape-matching rules (skip norms) see it
        else:
            keys = self.k_proj(op, hidden)
            values = keys if self.v_proj is None else self.v_proj(op, hidden)
            k = self._rotated(op, self._heads(op, keys, self.num_kv_heads, self.k_norm), cos, sin)
            v = self._heads(op, values, self.num_kv_heads, self.v_norm)
            attn, *present = scaled_dot_product_attention(op, q, k, v, mask, past_key,
                                                          past_value, 1.0)
        attn = op.Reshape(op.Transpose(attn, perm=[0, 2, 1, 3]),
                          op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        return self.o_proj(op, attn), tuple(present)
