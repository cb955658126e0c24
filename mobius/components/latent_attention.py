"""Multi-head latent attention (DeepSeek-V2/V3), computed on the cached latent.

transformers' reference, per head h (nope = qk_nope_head_dim, rope = qk_rope_head_dim):

    c      = kv_a_layernorm(kv_a_proj_with_mqa(x)[:kv_lora_rank])     latent   [S, r]
    k_pe   = rope(kv_a_proj_with_mqa(x)[kv_lora_rank:])               shared   [S, rope]
    k_h    = [W_UK_h c ; k_pe],  v_h = W_UV_h c              (kv_b_proj = [W_UK_h; W_UV_h]_h)
    out_h  = softmax(q_h . k_h * scale) v_h

**The cache holds the latent, not per-head K/V.** Scores are linear in c, so
q_nope_h . W_UK_h c = (W_UK_h^T q_nope_h) . c and
sum_j p_j W_UV_h c_j = W_UV_h sum_j p_j c_j:
the attention runs as multi-query attention over one shared head
``[k_pe ; c]`` of size rope + r, with the query ``[rope(q_pe) ; q_nope W_UK_h]``,
and W_UV_h applied to the last r features of each head's output.
This is the same math as the reference (the scale is unchanged: the scores are
equal) and the cache per token and layer is 2 * (rope + r) values instead of
heads * (nope + rope + v) (DeepSeek-V3: 1152 vs 40960; per-head K/V for one
128k-token sequence would take 655 GB in bf16, the latent 18 GB), so the
latent is the practical cache form; transformers caches the latent too.

Cache layout (so the standard attention forms apply unchanged):
``past_key_values.{i}.key`` = [batch, 1, past, rope + r] = [rope(k_pe) ; c] and
``.value`` = the same head *before* RoPE. The value's first ``rope`` features
are never used (the output keeps only the last r), so the value may carry them
un-rotated; with equal K and V head sizes the graph is the opset-23
``Attention`` pattern that the GroupQueryAttention fusion recognises (one KV
head, partial RoPE on the first ``rope`` features) and that onnxruntime-genai
sizes with one ``head_size``. RoPE rotates the first ``rope`` features, which
is why k_pe comes first. Measured on onnxruntime 1.32's CPU EP: opset-23
Attention and com.microsoft MultiHeadAttention accept a value head size other
than the key's, GroupQueryAttention refuses it ("Input 'value' is expected to
have same hidden size as key") and runs head size 576 (DeepSeek-V3's
64 + 512); so a value of r features alone would save 64 of 1152 cached values
per token but lose the fused kernel, which is not worth it.

DeepSeek's interleaved rotary layout (V2 always, V3 ``rope_interleave``) rotates
adjacent pairs (RotaryEmbedding interleaved=1); transformers' V3 then
de-interleaves q and k alike, a permutation the dot product does not see, so
the graph keeps the interleaved layout.
"""

from __future__ import annotations

import numpy as np
from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.rms_norm import RMSNorm
from mobius.components.rotary import apply_rotary
from mobius.components.weight import Weight

#: DeepSeek's q_a_layernorm / kv_a_layernorm use the RMSNorm default, not rms_norm_eps.
LATENT_NORM_EPS = 1e-6


class _KvUp(nn.Module):
    """kv_b_proj [heads * (nope + v), r] read as W_UK [heads, nope, r] and W_UV^T [heads, r, v]."""

    def __init__(self, checkpoint_name: str, heads: int, nope: int, v_dim: int, rank: int):
        super().__init__()
        stored = [heads * (nope + v_dim), rank]

        def per_head(a):
            return np.asarray(a).reshape(heads, nope + v_dim, rank)

        self.key = Weight([heads, nope, rank], checkpoint_shape=stored,
                          checkpoint_name=checkpoint_name,
                          transform=lambda a: np.ascontiguousarray(per_head(a)[:, :nope]))
        self.value = Weight([heads, rank, v_dim], checkpoint_shape=stored,
                            checkpoint_name=checkpoint_name,
                            transform=lambda a: np.ascontiguousarray(
                                per_head(a)[:, nope:].transpose(0, 2, 1)))

    def forward(self, op, x, part: str):
        """x [..., heads, 1, nope] @ W_UK (part "key") or [..., heads, 1, r] @ W_UV^T ("value")."""
        return op.MatMul(x, self.key if part == "key" else self.value)


class LatentAttention(nn.Module):
    """MLA with checkpoint names ``q_proj`` | ``q_a_proj``/``q_a_layernorm``/``q_b_proj``,
    ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``.

    Args:
        prefix: the module's checkpoint name (``model.layers.{i}.self_attn``):
            kv_b_proj is read twice, as W_UK and W_UV.
        q_lora_rank: low-rank query (q_a_proj -> norm -> q_b_proj); None: q_proj.
        bias: attention_bias (q_a_proj, kv_a_proj_with_mqa and o_proj).
        interleaved: RoPE rotates adjacent pairs.
    """

    def __init__(self, prefix: str, hidden_size: int, num_heads: int, *, q_lora_rank: int | None,
                 kv_lora_rank: int, nope_dim: int, rope_dim: int, v_dim: int, scale: float,
                 bias: bool = False, interleaved: bool = True):
        super().__init__()
        self.num_heads, self.rank, self.rope_dim = num_heads, kv_lora_rank, rope_dim
        self.nope_dim, self.v_dim, self.scale = nope_dim, v_dim, scale
        self.interleaved = interleaved
        q_size = num_heads * (nope_dim + rope_dim)
        self.q_proj = self.q_a_proj = self.q_a_layernorm = self.q_b_proj = None
        if q_lora_rank is None:
            self.q_proj = Linear(hidden_size, q_size)
        else:
            self.q_a_proj = Linear(hidden_size, q_lora_rank, bias)
            self.q_a_layernorm = RMSNorm(q_lora_rank, LATENT_NORM_EPS)
            self.q_b_proj = Linear(q_lora_rank, q_size)
        self.kv_a_proj_with_mqa = Linear(hidden_size, kv_lora_rank + rope_dim, bias)
        self.kv_a_layernorm = RMSNorm(kv_lora_rank, LATENT_NORM_EPS)
        self.kv_b_proj = _KvUp(f"{prefix}.kv_b_proj.weight", num_heads, nope_dim, v_dim,
                               kv_lora_rank)
        self.o_proj = Linear(num_heads * v_dim, hidden_size, bias)

    def _query(self, op, hidden):
        """[batch, seq, heads, rope + r]: [q_pe ; q_nope W_UK] per head (RoPE not yet applied)."""
        if self.q_proj is not None:
            q = self.q_proj(op, hidden)
        else:
            q = self.q_b_proj(op, self.q_a_layernorm(op, self.q_a_proj(op, hidden)))
        q = op.Reshape(q, op.Constant(value_ints=[0, 0, self.num_heads,
                                                  self.nope_dim + self.rope_dim]))
        q_nope, q_pe = op.Split(q, op.Constant(value_ints=[self.nope_dim, self.rope_dim]),
                                axis=-1, _outputs=2)
        absorbed = self.kv_b_proj(op, op.Unsqueeze(q_nope, op.Constant(value_ints=[-2])),
                                  "key")  # [b, s, h, 1, r]
        absorbed = op.Reshape(absorbed, op.Constant(value_ints=[0, 0, self.num_heads, self.rank]))
        return op.Concat(q_pe, absorbed, axis=-1)

    def _latent(self, op, hidden):
        """[batch, 1, seq, rope + r]: the shared head [k_pe ; norm(c)] (RoPE not yet applied)."""
        kv = self.kv_a_proj_with_mqa(op, hidden)
        c, k_pe = op.Split(kv, op.Constant(value_ints=[self.rank, self.rope_dim]), axis=-1,
                           _outputs=2)
        head = op.Concat(k_pe, self.kv_a_layernorm(op, c), axis=-1)
        head = op.Reshape(head, op.Constant(value_ints=[0, 0, 1, self.rope_dim + self.rank]))
        return op.Transpose(head, perm=[0, 2, 1, 3])

    def forward(self, op, hidden, cos, sin, mask, past_key, past_value):
        width = self.rope_dim + self.rank
        q = op.Transpose(self._query(op, hidden), perm=[0, 2, 1, 3])
        q = apply_rotary(op, q, cos, sin, self.rope_dim, width, self.interleaved)
        latent = self._latent(op, hidden)
        key = apply_rotary(op, latent, cos, sin, self.rope_dim, width, self.interleaved)
        out, present_key, present_value = op.Attention(
            q, key, latent, mask, past_key, past_value, is_causal=0, scale=float(self.scale),
            _outputs=3)
        out = op.Transpose(out, perm=[0, 2, 1, 3])
        out = op.Reshape(out, op.Constant(value_ints=[0, 0, self.num_heads * width]))
        out = op.Reshape(out, op.Constant(value_ints=[0, 0, self.num_heads, width]))
        out = op.Slice(out, op.Constant(value_ints=[self.rope_dim]),
                       op.Constant(value_ints=[width]), op.Constant(value_ints=[-1]))
        out = self.kv_b_proj(op, op.Unsqueeze(out, op.Constant(value_ints=[-2])), "value")
        out = op.Reshape(out, op.Constant(value_ints=[0, 0, self.num_heads * self.v_dim]))
        return self.o_proj(op, out), present_key, present_value
