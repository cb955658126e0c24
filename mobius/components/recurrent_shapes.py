"""A recurrent mixer's outputs take the symbolic shapes of the values they stand for.

A chunked scan (Mamba's, Mamba2's, the gated delta rule's) splits the sequence into a
dynamic number of chunks, and shape inference loses the symbolic dims on the way; rules
that match on shapes (the residual Add + norm fusion) then miss the layer. The mixer's
output has its input's shape, each present state its past state's.
"""

from __future__ import annotations

import onnx_ir as ir


def restate_shapes(*pairs: tuple[ir.Value, ir.Value]) -> None:
    """For each ``(value, like)``: ``value`` takes ``like``'s shape where that is known."""
    for value, like in pairs:
        if like.shape is not None:
            value.shape = ir.Shape(list(like.shape))
