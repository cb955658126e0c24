"""The LM head: logits = hidden @ E^T + b, with E [vocab, hidden] in checkpoint layout.

A Gemm with ``transB=1`` reads the matrix as the checkpoint stores it, so the
build copies it without a transpose and a tied head reads the input
embedding's own initializer: the package holds the matrix once. (A MatMul
would need E^T: a second copy on disk, or a Transpose that ONNX Runtime folds
into a second copy in memory at session load.)
"""

from __future__ import annotations

from onnxscript import nn

from mobius.components.embedding import Embedding
from mobius.components.weight import Weight


class LMHead(nn.Module):
    """``tied``: the Embedding whose weight this head reads (it must run earlier in
    the same graph, which adds its weight as an initializer); else the head has
    its own ``weight``, read from ``checkpoint_name`` when given."""

    def __init__(self, hidden_size: int, vocab_size: int, bias: bool = False, *,
                 tied: Embedding | None = None, checkpoint_name: str | None = None):
        super().__init__()
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        # A tuple keeps the embedding out of this module's parameters: the
        # weight is the embedding's, named and attached once.
        self.tied = (tied,) if tied is not None else ()
        if tied is None:
            self.weight = Weight([vocab_size, hidden_size], checkpoint_name=checkpoint_name)
        self.bias = Weight([vocab_size]) if bias else None

    @property
    def matrix(self) -> Weight:
        """The [vocab, hidden] matrix this head multiplies by."""
        return self.tied[0].weight if self.tied else self.weight

    def forward(self, op, hidden):
        rows = op.Reshape(hidden, op.Constant(value_ints=[-1, self.hidden_size]))
        inputs = [rows, self.matrix] + ([self.bias] if self.bias is not None else [])
        logits = op.Gemm(*inputs, transB=1)
        shape = op.Concat(op.Shape(hidden, end=-1), op.Constant(value_ints=[self.vocab_size]),
                          axis=0)
        return op.Reshape(logits, shape)
