"""com.microsoft GatherBlockQuantized (a quantized embedding lookup) and its standard-ONNX body.

    output = GatherBlockQuantized(data, indices, scales[, zero_points],
                                  gather_axis=0, quantize_axis=1, block_size=, bits=)

with data uint8 [V, H * bits / 8] (codes packed low nibble first for 4 bits),
scales [V, H / block_size] and zero points packed like the data (implicitly
2**(bits - 1)): ``output = dequantize(data)[indices]``. The body unpacks and
dequantizes the table (blocked DequantizeLinear along H) and gathers from it.

The *blocked* form reads MatMulNBits' B as it is, data [V, blocks, blob]
with scales [V, blocks, 1] (quantize_axis 2, one block per last-axis row),
and gives [..., blocks, block_size]: a tied LM head's MatMulNBits and the
lookup then share one initializer (mobius.quantize.emit_tied). It takes no
zero points: ORT's CPU kernel reads them one per byte in this shape, its
CUDA and WebGPU kernels two per byte.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "GatherBlockQuantized"


@dataclasses.dataclass(frozen=True)
class GatherBlockQuantizedSpec:
    rows: int
    cols: int
    bits: int
    block_size: int
    zero_points: bool
    blocked: bool = False

    def __post_init__(self) -> None:
        if self.blocked and (self.zero_points or self.cols % self.block_size):
            raise ValueError("the blocked GatherBlockQuantized form is symmetric, whole blocks")

    @property
    def overload(self) -> str:
        return (f"v{self.rows}_h{self.cols}_b{self.bits}_bs{self.block_size}"
                f"_zp{int(self.zero_points)}" + ("_blocked" if self.blocked else ""))


def make_gather_block_quantized_node(model: ir.Model, spec: GatherBlockQuantizedSpec,
                                     inputs: list, name: str | None) -> ir.Node:
    """inputs: [data, indices, scales] or [data, indices, scales, zero_points]."""
    axis = 2 if spec.blocked else 1
    attributes = [ir.AttrInt64("gather_axis", 0), ir.AttrInt64("quantize_axis", axis),
                  ir.AttrInt64("block_size", spec.block_size), ir.AttrInt64("bits", spec.bits)]
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, attributes=attributes, num_outputs=1, name=name)
    types = [v.type for v in inputs]
    attach_function(model, node, _make_body(spec), types, spec.overload)
    return node


def _unpack(op, packed, rows: int, cols: int):
    """uint8 [rows, ceil(cols / 2)] nibble pairs -> [rows, cols] (low nibble first)."""
    low = op.BitwiseAnd(packed, op.Constant(value=ir.tensor(np.uint8(15))))
    high = op.BitShift(packed, op.Constant(value=ir.tensor(np.uint8(4))), direction="RIGHT")
    axes = op.Constant(value_ints=[-1])
    pairs = op.Concat(op.Unsqueeze(low, axes), op.Unsqueeze(high, axes), axis=-1)
    flat = op.Reshape(pairs, op.Constant(value_ints=[rows, -1]))
    if cols % 2 == 0:
        return flat
    one = op.Constant(value_ints=[1])
    return op.Slice(flat, op.Constant(value_ints=[0]), op.Constant(value_ints=[cols]), one, one)


def _make_body(spec: GatherBlockQuantizedSpec):
    blocks = spec.cols // spec.block_size

    def body(op, data, indices, scales, zero_points=None):
        if spec.blocked:  # [V, blocks, blob], scales [V, blocks, 1]: the same bytes as 2-D
            data = op.Reshape(data, op.Constant(value_ints=[spec.rows, -1]))
            scales = op.Reshape(scales, op.Constant(value_ints=[spec.rows, blocks]))
        codes = _unpack(op, data, spec.rows, spec.cols) if spec.bits == 4 else data
        if zero_points is None:
            implicit = op.Constant(value=ir.tensor(np.uint8(1 << (spec.bits - 1))))
            zero_points = op.Expand(implicit, op.Constant(value_ints=[spec.rows, blocks]))
        elif spec.bits == 4:
            zero_points = _unpack(op, zero_points, spec.rows, blocks)
        table = op.DequantizeLinear(codes, scales, zero_points, axis=1, block_size=spec.block_size)
        if spec.blocked:
            table = op.Reshape(table, op.Constant(value_ints=[spec.rows, blocks, spec.block_size]))
        return op.Gather(table, indices, axis=0)

    return body
