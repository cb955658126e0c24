"""com.microsoft MatMulNBits and its standard-ONNX body.

    Y = MatMulNBits(A, B, scales[, zero_points], K=, N=, bits=, block_size=, accuracy_level=)

is ``A @ W^T`` with W [N, K] block-dequantized along K: B holds uint8
[N, blocks, block_size * bits / 8] codes, packed low nibble first for 4 bits;
scales [N, blocks] have A's dtype; zero points are uint8 [N, blocks] (8 bits)
or two per byte [N, ceil(blocks / 2)] (4 bits), implicitly 2**(bits - 1).
The body unpacks the nibbles with bitwise ops and dequantizes with a blocked
DequantizeLinear (opset 21) along K, so inlining gives the same numbers as
the kernel at accuracy level 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "MatMulNBits"
INPUT_NAMES = ("A", "B", "scales", "zero_points")


@dataclasses.dataclass(frozen=True)
class MatMulNBitsSpec:
    k: int
    n: int
    bits: int
    block_size: int
    accuracy_level: int
    zero_points: bool

    @property
    def blocks(self) -> int:
        return -(-self.k // self.block_size)

    @property
    def overload(self) -> str:
        return (f"k{self.k}_n{self.n}_b{self.bits}_bs{self.block_size}"
                f"_zp{int(self.zero_points)}")


def make_matmul_nbits_node(model: ir.Model, spec: MatMulNBitsSpec, inputs: list,
                           name: str | None) -> ir.Node:
    """Creates (not inserts) a MatMulNBits node carrying its function body.

    ``inputs``: [A, B, scales] or [A, B, scales, zero_points] per ``spec.zero_points``.
    """
    attributes = [ir.AttrInt64("K", spec.k), ir.AttrInt64("N", spec.n),
                  ir.AttrInt64("bits", spec.bits), ir.AttrInt64("block_size", spec.block_size),
                  ir.AttrInt64("accuracy_level", spec.accuracy_level)]
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, attributes=attributes, num_outputs=1, name=name)
    types = [v.type for v in inputs]
    attach_function(model, node, _make_body(spec), types, spec.overload)
    return node


def _unpack(op, packed, rows: int, count: int):
    """uint8 [rows, ..., m] of nibble pairs -> uint8 [rows, count] (low nibble first)."""
    low = op.BitwiseAnd(packed, op.Constant(value=ir.tensor(np.uint8(15))))
    high = op.BitShift(packed, op.Constant(value=ir.tensor(np.uint8(4))), direction="RIGHT")
    axes = op.Constant(value_ints=[-1])
    pairs = op.Concat(op.Unsqueeze(low, axes), op.Unsqueeze(high, axes), axis=-1)
    flat = op.Reshape(pairs, op.Constant(value_ints=[rows, -1]))
    return _take_columns(op, flat, count)


def _take_columns(op, matrix, count: int):
    """matrix[:, :count]."""
    one = op.Constant(value_ints=[1])
    return op.Slice(matrix, op.Constant(value_ints=[0]), op.Constant(value_ints=[count]), one, one)


def _make_body(spec: MatMulNBitsSpec):
    padded = spec.blocks * spec.block_size

    def body(op, a, b, scales, zero_points=None):
        if spec.bits == 4:
            codes = _unpack(op, b, spec.n, padded)
        else:
            codes = op.Reshape(b, op.Constant(value_ints=[spec.n, padded]))
        if zero_points is None:
            implicit = op.Constant(value=ir.tensor(np.uint8(1 << (spec.bits - 1))))
            zero_points = op.Expand(implicit, op.Constant(value_ints=[spec.n, spec.blocks]))
        elif spec.bits == 4:
            zero_points = _unpack(op, zero_points, spec.n, spec.blocks)
        weight = op.DequantizeLinear(codes, scales, zero_points, axis=1,
                                     block_size=spec.block_size)
        if padded != spec.k:
            weight = _take_columns(op, weight, spec.k)
        return op.MatMul(a, op.Transpose(weight, perm=[1, 0]))

    return body
