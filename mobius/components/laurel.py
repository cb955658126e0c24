"""LAuReL, the learned augmented residual (Gemma 3n): x + norm(right(left(x))), a
low-rank (``rank``) linear branch beside the layer, RMSNormed."""

from __future__ import annotations

from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.rms_norm import RMSNorm


class LaurelBlock(nn.Module):
    """``linear_left`` [rank, hidden], ``linear_right`` [hidden, rank], ``post_laurel_norm``."""

    def __init__(self, hidden_size: int, rank: int, eps: float):
        super().__init__()
        self.linear_left = Linear(hidden_size, rank)
        self.linear_right = Linear(rank, hidden_size)
        self.post_laurel_norm = RMSNorm(hidden_size, eps)

    def forward(self, op, x):
        branch = self.linear_right(op, self.linear_left(op, x))
        return op.Add(x, self.post_laurel_norm(op, branch))
