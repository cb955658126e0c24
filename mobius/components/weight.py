"""Parameters whose data comes from the checkpoint."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.context import get_build_dtype
from mobius.threads import MAX_THREADS, run_on_threads

Transform = Callable[[np.ndarray], np.ndarray]


def transpose(array: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """[out, in] (PyTorch Linear layout) -> [in, out] (MatMul layout), C-contiguous.

    Copies tiles of 16 source rows by 1024 columns: several times faster than
    ``np.ascontiguousarray(array.T)``, whose strided gather misses the cache on
    every element of a large matrix; the column tiles keep a tile's output rows
    in cache (float32 Llama-3.2-1B projections: 1.8-2.3 GB/s, vs 1.4-1.7 GB/s
    for whole-width bands of 8 rows). ``out`` (C-contiguous, the result's shape
    and dtype; a different float dtype converts as it copies): write there,
    e.g. straight into a mapped data file. A large matrix is split into runs
    of rows copied on ``TRANSPOSE_THREADS`` threads (numpy releases the GIL in
    each tile's copy; [8192, 2048] f32 -> f16: 57-68 ms on one, 35-52 ms on two).
    """
    if out is None:
        out = np.empty(array.shape[::-1], dtype=array.dtype)
    if array.ndim != 2:
        with np.errstate(over="ignore"):  # the caller checks a cast's Inf (weights/dtypes.py)
            out[...] = array.T
        return out
    # Slice a plain ndarray: slicing an np.memmap runs Python code per slice.
    array = np.asarray(array)
    rows = array.shape[0]
    threads = max(1, min(TRANSPOSE_THREADS, -(-array.size // _THREAD_ELEMENTS)))
    per = max(1, -(-rows // (threads * _TILE_ROWS))) * _TILE_ROWS  # whole tiles per thread
    run_on_threads(lambda first: _transpose_rows(array, out, first, min(rows, first + per)),
                   range(0, rows, per), threads)
    return out


#: tile of the blocked transpose: source rows x source columns
_TILE_ROWS, _TILE_COLS = 16, 1024
#: threads for one large transpose, and the elements each must have at least
TRANSPOSE_THREADS = MAX_THREADS
_THREAD_ELEMENTS = 1 << 20


def _transpose_rows(array: np.ndarray, out: np.ndarray, first: int, stop: int) -> None:
    """out[:, first:stop] = array[first:stop].T, tile by tile (a cast that overflows to
    Inf is silent here: the caller checks the result, weights/dtypes.check_cast)."""
    with np.errstate(over="ignore"):
        for start in range(first, stop, _TILE_ROWS):
            band = array[start : min(stop, start + _TILE_ROWS)]
            for col in range(0, array.shape[1], _TILE_COLS):
                out[col : col + _TILE_COLS, start : start + band.shape[0]] = (
                    band[:, col : col + _TILE_COLS].T)


@dataclasses.dataclass(frozen=True)
class Sources:
    """Several checkpoint tensors that make one parameter at build time (weight
    normalization's magnitude and direction).

    ``spellings``: alternative tuples of tensor names, relative to the parameter's
    module; the first spelling whose first tensor the checkpoint holds is read.
    ``combine(*arrays)`` (in spelling order) returns the parameter's array.
    """

    spellings: tuple[tuple[str, ...], ...]
    shapes: tuple[tuple[int, ...], ...]
    combine: Callable[..., np.ndarray]


class Weight(nn.Parameter):
    """A float parameter read from the checkpoint when the graph is saved.

    Args:
        shape: the initializer's shape, after ``transform``.
        checkpoint_name: the tensor's name in the checkpoint when it differs
            from the parameter's qualified name (e.g. tied embeddings).
        transform: turns the checkpoint array into the initializer's layout;
            ``checkpoint_shape`` is the shape it expects.
        checkpoint_rows: read only rows [start, stop) of the checkpoint tensor (one
            part of a fused projection), then ``transform`` them: as data, so the
            rows can also be copied as they are stored (a contiguous byte range).
        sources: the parameter is computed from several checkpoint tensors
            (then ``checkpoint_name``, ``checkpoint_shape`` and ``transform`` do not apply).
    """

    def __init__(
        self,
        shape: Sequence[int],
        *,
        checkpoint_shape: Sequence[int] | None = None,
        transform: Transform | None = None,
        checkpoint_name: str | None = None,
        dtype: ir.DataType | None = None,
        sources: Sources | None = None,
        checkpoint_rows: tuple[int, int] | None = None,
    ):
        super().__init__(list(shape), dtype=dtype or get_build_dtype())
        self.checkpoint_name = checkpoint_name
        self.checkpoint_shape = tuple(checkpoint_shape if checkpoint_shape is not None else shape)
        self.transform = transform
        self.sources = sources
        self.checkpoint_rows = checkpoint_rows


def constant(array: np.ndarray, name: str) -> nn.Parameter:
    """A parameter with data computed at build time (e.g. RoPE tables)."""
    return nn.Parameter(list(array.shape), name=name, data=ir.tensor(array, name=name))
