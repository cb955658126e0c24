"""Multi-head / grouped-query self-attention with a KV cache, in standard ONNX.

Emits the opset-23 ``Attention`` op with an explicit additive mask (causal +
padding + optional sliding window, built once per model by
:mod:`mobius.components.attention_mask`), so the generic graph runs on any
ONNX runtime. EP-specific forms (GroupQueryAttention, packed QKV) are produced
later by rewrite rules, never here.
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components.attention_sinks import sink_attention
from mobius.components.causal_transformer import scalar
from mobius.components.linear import Linear
from mobius.components.rotary import apply_rotary
from mobius.components.weight import Weight
from mobius.context import get_build_dtype


class Attention(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        rotary_dim: int | None,
        *,
        qkv_bias: bool = False,
        o_bias: bool = False,
        q_norm: nn.Module | None = None,
        k_norm: nn.Module | None = None,
        qk_norm_per_head: bool = True,
        scale: float | None = None,
        softcap: float | None = None,
        clip_qkv: float | None = None,
        qk_norm_names: tuple[str, str] = ("q_norm", "k_norm"),
        rotary_interleaved: bool = False,
        qk_norm_after_rope: bool = False,
        sinks: bool = False,
        output_gate: bool = False,
        head_gate: bool = False,
    ):
        """q_norm/k_norm: optional norms of the projected queries/keys, applied
        per head ([.., head_dim], Qwen3/Gemma3) or over the whole projection
        (OLMo2) per ``qk_norm_per_head``. softcap: tanh-capping of the logits.
        clip_qkv: clamp the Q/K/V projections to [-clip_qkv, clip_qkv] (OLMo).
        qk_norm_names: the norms' checkpoint attribute names (StableLM: q_layernorm).
        rotary_interleaved: RoPE rotates adjacent pairs (Cohere, GLM).
        qk_norm_after_rope: the per-head QK norms apply to the rotated Q/K (HunYuan).
        sinks: a learned per-head sink logit joins the softmax (gpt-oss; ``sinks`` [heads]).
        output_gate: q_proj also makes, per head after its queries, a gate; the output is
        attn * sigmoid(gate) before o_proj (Qwen3-Next's gated attention).
        head_gate: each head's output times sigmoid(gate_proj(hidden)), one gate per head
        from the layer input (LFM3; ``gate_proj`` [heads, hidden], no bias)."""
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim
        self.scale = scale if scale is not None else head_dim**-0.5
        self.softcap = softcap
        self.qk_norm_per_head = qk_norm_per_head
        self.clip_qkv = clip_qkv
        self.rotary_interleaved = rotary_interleaved
        self.qk_norm_after_rope = qk_norm_after_rope
        self.output_gate = output_gate
        self.q_proj = Linear(hidden_size, num_heads * head_dim * (2 if output_gate else 1),
                             qkv_bias)
        self.k_proj = Linear(hidden_size, num_kv_heads * head_dim, qkv_bias)
        self.v_proj = Linear(hidden_size, num_kv_heads * head_dim, qkv_bias)
        self.o_proj = Linear(num_heads * head_dim, hidden_size, o_bias)
        self.gate_proj = Linear(hidden_size, num_heads) if head_gate else None
        self.qk_norm_names = qk_norm_names
        setattr(self, qk_norm_names[0], q_norm)
        setattr(self, qk_norm_names[1], k_norm)
        if sinks and softcap:
            raise ValueError("attention sinks with logit softcapping are not supported")
        self.sinks = Weight([num_heads]) if sinks else None
        self.dtype = get_build_dtype()

    def _heads(self, op, x, num_heads, norm):
        """[batch, seq, heads*dim] -> [batch, heads, seq, dim] (+ optional QK norm)."""
        if norm is not None and not self.qk_norm_per_head:
            x = norm(op, x)
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, num_heads, self.head_dim]))
        if norm is not None and self.qk_norm_per_head:
            x = norm(op, x)
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def _project(self, op, proj, hidden):
        x = proj(op, hidden)
        if self.clip_qkv is None:
            return x
        return op.Clip(x, scalar(op, -self.clip_qkv), scalar(op, self.clip_qkv))

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        q_norm, k_norm = (getattr(self, name) for name in self.qk_norm_names)
        late = self.qk_norm_after_rope
        q, gate = self._queries(op, hidden, None if late else q_norm)
        k = self._heads(op, self._project(op, self.k_proj, hidden), self.num_kv_heads,
                        None if late else k_norm)
        v = self._heads(op, self._project(op, self.v_proj, hidden), self.num_kv_heads, None)
        if self.rotary_dim:
            q = apply_rotary(op, q, cos, sin, self.rotary_dim, self.head_dim,
                             self.rotary_interleaved)
            k = apply_rotary(op, k, cos, sin, self.rotary_dim, self.head_dim,
                             self.rotary_interleaved)
        if late and q_norm is not None:  # [batch, heads, seq, head_dim]: per head, last axis
            q, k = q_norm(op, q), k_norm(op, k)
        if self.sinks is not None:
            attn, present_key, present_value = sink_attention(
                op, q, k, v, mask, past_key, past_value, self.sinks, self.num_heads, self.scale,
                self.dtype)
        else:
            attn, present_key, present_value = scaled_dot_product_attention(
                op, q, k, v, mask, past_key, past_value, self.scale, self.softcap)
        attn = op.Transpose(attn, perm=[0, 2, 1, 3])
        attn = op.Reshape(attn, op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        if gate is not None:
            attn = op.Mul(attn, op.Sigmoid(gate))
        if self.gate_proj is not None:
            attn = self._gate_heads(op, attn, hidden)
        return self.o_proj(op, attn), present_key, present_value

    def _gate_heads(self, op, attn, hidden):
        """attn [batch, seq, heads*dim] times sigmoid(gate_proj(hidden)) [batch, seq, heads]
        per head; after the output Reshape, so the fused-attention patterns still match."""
        heads = op.Reshape(attn, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
        head_gate = op.Unsqueeze(op.Sigmoid(self.gate_proj(op, hidden)),
                                 op.Constant(value_ints=[-1]))
        return op.Reshape(op.Mul(heads, head_gate),
                          op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))

    def _queries(self, op, hidden, norm):
        """-> (q [batch, heads, seq, dim], the output gate [batch, seq, heads*dim] or None)."""
        x = self._project(op, self.q_proj, hidden)
        if not self.output_gate:
            return self._heads(op, x, self.num_heads, norm), None
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, 2 * self.head_dim]))
        q, gate = op.Split(x, op.Constant(value_ints=[self.head_dim, self.head_dim]), axis=-1,
                           _outputs=2)
        gate = op.Reshape(gate, op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        q = op.Reshape(q, op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        return self._heads(op, q, self.num_heads, norm), gate


def scaled_dot_product_attention(op, q, k, v, mask, past_key=None, past_value=None,
                                 scale=None, softcap=None):
    """The standard opset-23 Attention op on [batch, heads, seq, dim] tensors.

    With a cache (past_key/past_value) it also returns the presents; without
    one (encoders) the presents are None.
    """
    extra = {"softcap": float(softcap)} if softcap else {}
    if scale is not None:
        extra["scale"] = float(scale)
    if past_key is None:
        return op.Attention(q, k, v, mask, is_causal=0, **extra), None, None
    return op.Attention(q, k, v, mask, past_key, past_value, is_causal=0, _outputs=3, **extra)
