"""com.microsoft QMoE (MoE with block-quantized expert weights) and its standard-ONNX body.

The layout onnxruntime's QMoE kernels take (CPU and CUDA, onnxruntime 1.32),
for the same SiLU-gated experts as mobius.contrib.moe:

    fc1_experts_weights  uint8 [E, 2*I, H * bits / 8]  interleaved gate/up rows, codes
                         packed low nibble first along H (4 bits) or one per byte (8)
    fc1_scales           [E, 2*I, H / block_size]
    fc2_experts_weights  uint8 [E, H, I * bits / 8];  fc2_scales [E, H, I / block_size]
    expert_weight_bits, block_size; symmetric: weight = (code - 2**(bits-1)) * scale

The body dequantizes the stacked weights (nibble unpacking, blocked
DequantizeLinear along the last axis) and runs the float MoE body on them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function
from mobius.contrib.moe import MoeSpec, moe_body

OP_TYPE = "QMoE"


@dataclasses.dataclass(frozen=True)
class QMoeSpec:
    moe: MoeSpec
    bits: int
    block_size: int

    @property
    def overload(self) -> str:
        return f"{self.moe.overload}_b{self.bits}_bs{self.block_size}"

    def attributes(self) -> dict:
        return {**self.moe.attributes(), "expert_weight_bits": self.bits,
                "block_size": self.block_size}


def make_qmoe_node(model: ir.Model, spec: QMoeSpec, inputs: list, name: str) -> ir.Node:
    """inputs: [input, router_logits, fc1, fc1_scales, fc1_bias or None, fc2, fc2_scales
    (, fc2_bias)]; the biases stay float."""
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, attributes=ir.convenience.convert_attributes(
        spec.attributes()), num_outputs=1, name=name)
    types = [v.type if v is not None else None for v in inputs]
    attach_function(model, node, lambda op, *args: _body(op, spec, *args), types, spec.overload)
    return node


def _dequantize(op, spec: QMoeSpec, packed, scales, rows: int, cols: int):
    """uint8 [E, rows, cols * bits / 8] -> float [E, rows, cols]."""
    experts = spec.moe.num_experts
    if spec.bits == 4:
        low = op.BitwiseAnd(packed, op.Constant(value=ir.tensor(np.uint8(15))))
        high = op.BitShift(packed, op.Constant(value=ir.tensor(np.uint8(4))), direction="RIGHT")
        axes = op.Constant(value_ints=[-1])
        pairs = op.Concat(op.Unsqueeze(low, axes), op.Unsqueeze(high, axes), axis=-1)
        packed = op.Reshape(pairs, op.Constant(value_ints=[experts, rows, cols]))
    implicit = op.Constant(value=ir.tensor(np.uint8(1 << (spec.bits - 1))))
    zero = op.Expand(implicit, op.Shape(scales))
    return op.DequantizeLinear(packed, scales, zero, axis=2, block_size=spec.block_size)


def _body(op, spec: QMoeSpec, x, router_logits, fc1, fc1_scales, fc1_bias=None, fc2=None,
          fc2_scales=None, fc2_bias=None):
    h, i = spec.moe.hidden_size, spec.moe.inter_size
    w1 = _dequantize(op, spec, fc1, fc1_scales, 2 * i, h)
    w2 = _dequantize(op, spec, fc2, fc2_scales, h, i)
    return moe_body(op, spec.moe, x, router_logits, w1, fc1_bias, w2, fc2_bias)
