"""Parameters whose data comes from the checkpoint."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.context import get_build_dtype

Transform = Callable[[np.ndarray], np.ndarray]


def transpose(array: np.ndarray) -> np.ndarray:
    """[out, in] (PyTorch Linear layout) -> [in, out] (MatMul layout), C-contiguous.

    Copies a few source rows at a time (32 bytes of each output row): about 4x
    faster than ``np.ascontiguousarray(array.T)``, whose strided gather misses
    the cache on every element of a large matrix.
    """
    if array.ndim != 2:
        return np.ascontiguousarray(array.T)
    # Slice a plain ndarray: slicing an np.memmap runs Python code per slice.
    array = np.asarray(array)
    rows, cols = array.shape
    out = np.empty((cols, rows), dtype=array.dtype)
    block = max(1, 32 // array.dtype.itemsize)
    for start in range(0, rows, block):
        out[:, start : start + block] = array[start : start + block].T
    return out


class Weight(nn.Parameter):
    """A float parameter read from the checkpoint when the graph is saved.

    Args:
        shape: the initializer's shape, after ``transform``.
        checkpoint_name: the tensor's name in the checkpoint when it differs
            from the parameter's qualified name (e.g. tied embeddings).
        transform: turns the checkpoint array into the initializer's layout;
            ``checkpoint_shape`` is the shape it expects.
    """

    def __init__(
        self,
        shape: Sequence[int],
        *,
        checkpoint_shape: Sequence[int] | None = None,
        transform: Transform | None = None,
        checkpoint_name: str | None = None,
        dtype: ir.DataType | None = None,
    ):
        super().__init__(list(shape), dtype=dtype or get_build_dtype())
        self.checkpoint_name = checkpoint_name
        self.checkpoint_shape = tuple(checkpoint_shape if checkpoint_shape is not None else shape)
        self.transform = transform


def constant(array: np.ndarray, name: str) -> nn.Parameter:
    """A parameter with data computed at build time (e.g. RoPE tables)."""
    return nn.Parameter(list(array.shape), name=name, data=ir.tensor(array, name=name))
