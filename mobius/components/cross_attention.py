"""The multi-head attention of BART-style encoder-decoders (Whisper, BART, Marian):
q/k/v/out projections named ``q_proj`` / ``k_proj`` / ``v_proj`` / ``out_proj``, queries
scaled by head_dim**-0.5, used as self-attention (with a KV cache) or as
cross-attention over keys and values projected once from the encoder states."""

from __future__ import annotations

from onnxscript import nn

from mobius.components.attention import scaled_dot_product_attention
from mobius.components.linear import Linear


class ProjectedAttention(nn.Module):
    """q/v/out projections with bias; the key projection's bias as ``key_bias`` says
    (Whisper has none, BART has one)."""

    def __init__(self, hidden_size: int, num_heads: int, key_bias: bool):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.q_proj = Linear(hidden_size, hidden_size, True)
        self.k_proj = Linear(hidden_size, hidden_size, key_bias)
        self.v_proj = Linear(hidden_size, hidden_size, True)
        self.out_proj = Linear(hidden_size, hidden_size, True)

    def _heads(self, op, x):
        """[batch, seq, heads*dim] -> [batch, heads, seq, dim]."""
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, self.num_heads, self.head_dim]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    def project_key_value(self, op, states):
        """Keys and values of ``states`` [batch, len, hidden] as [batch, heads, len, dim]."""
        return self._heads(op, self.k_proj(op, states)), self._heads(op, self.v_proj(op, states))

    def forward(self, op, hidden, mask=None, past_key=None, past_value=None, *, key=None,
                value=None):
        """Self-attention over ``hidden`` (with a cache if ``past_key`` is given), or
        cross-attention to precomputed ``key``/``value`` [batch, heads, len, dim]."""
        query = self._heads(op, self.q_proj(op, hidden))
        if key is None:
            key, value = self.project_key_value(op, hidden)
        attn, present_key, present_value = scaled_dot_product_attention(
            op, query, key, value, mask, past_key, past_value, scale=self.head_dim**-0.5)
        attn = op.Transpose(attn, perm=[0, 2, 1, 3])
        attn = op.Reshape(attn, op.Constant(value_ints=[0, 0, self.num_heads * self.head_dim]))
        return self.out_proj(op, attn), present_key, present_value
