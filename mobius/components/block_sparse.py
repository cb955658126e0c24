"""Phi-3-small's local + vertical-stride block-sparse attention pattern, as a mask.

Token positions fall into blocks of ``block_size``. A query in block ``qb`` sees a key
in block ``kb <= qb`` (and at a position no later than its own) when the key's block is
one of the ``local_blocks`` nearest (``qb - kb < local_blocks``) or a "vertical" block:
``(kb + 1 + offset) % vert_stride == 0``. With ``homo_head`` every head has offset 0;
otherwise head ``h`` has offset ``h * max(1, vert_stride // num_heads)``, so the heads
cover different vertical blocks. Positions count real tokens (the attention mask's
running sum), so a left-padded or right-padded row sees the pattern of its own tokens.

Applied as a restriction of the causal mask, the attention stays exact where kernels
skip the blocked tiles; a row never loses its own block, so it never sees nothing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir


@dataclasses.dataclass(frozen=True)
class BlockSparsePattern:
    block_size: int
    local_blocks: int
    vert_stride: int
    homo_head: bool
    num_heads: int

    def head_offsets(self) -> np.ndarray:
        """Each query head's vertical-stride offset: [heads], or [1] (0) with homo_head."""
        if self.homo_head:
            return np.zeros(1, np.int64)
        step = max(1, self.vert_stride // self.num_heads)
        return np.arange(self.num_heads, dtype=np.int64) * step

    def allowed(self, op, query_positions, key_positions):
        """bool [batch, heads or 1, seq, total] from token positions [batch, seq] /
        [batch, total] (padding keys may be anything: the caller blocks them)."""
        block = op.Constant(value_int=self.block_size)
        zero = op.Constant(value_int=0)
        # clamp at 0 first: ONNX Div truncates towards zero, positions of padding are -1
        query_blocks = op.Div(op.Max(query_positions, zero), block)
        key_blocks = op.Div(op.Max(key_positions, zero), block)
        queries = op.Unsqueeze(query_blocks, op.Constant(value_ints=[1, 3]))  # [b, 1, s, 1]
        keys = op.Unsqueeze(key_blocks, op.Constant(value_ints=[1, 2]))  # [b, 1, 1, t]
        local = op.Less(op.Sub(queries, keys), op.Constant(value_int=self.local_blocks))
        offsets = self.head_offsets().reshape(-1, 1, 1) + 1  # [heads or 1, 1, 1]
        shifted = op.Add(keys, op.Constant(value=ir.tensor(offsets)))
        vertical = op.Equal(op.Mod(shifted, op.Constant(value_int=self.vert_stride)), zero)
        return op.Or(local, vertical)  # [b, heads or 1, s, t]
