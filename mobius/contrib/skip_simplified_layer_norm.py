"""com.microsoft SkipSimplifiedLayerNormalization and its standard-ONNX body.

    output, mean, inv_std_var, input_skip_bias_sum =
        SkipSimplifiedLayerNormalization(input, skip, gamma[, bias], epsilon=eps)

is ``s = input + skip (+ bias)``, ``output = RMSNormalization(s, gamma)`` over
the last axis. The kernels accumulate in float32 whatever the tensor dtype,
i.e. they compute ``RMSNormalization(..., stash_type=1)``; the body carries the
``stash_type`` of the norm it was fused from (part of the overload key), so
inlining reproduces the original graph exactly.

``mean`` / ``inv_std_var`` (float32, ``[..., 1]``) are training outputs that
mobius never requests (the node leaves them absent); the body still defines
them, as the mean of ``s`` and ``1 / sqrt(mean(s^2) + eps)``, so that every
declared output has a value. Inlining a call that leaves them absent leaves
those body nodes dead; the pipeline's fold stage (RemoveUnused) drops them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "SkipSimplifiedLayerNormalization"
INPUT_NAMES = ("input", "skip", "gamma", "bias")
OUTPUT_NAMES = ("output", "mean", "inv_std_var", "input_skip_bias_sum")


@dataclasses.dataclass(frozen=True)
class SkipSimplifiedSpec:
    epsilon: float
    stash_type: int = 1

    @property
    def overload(self) -> str:
        # float32, as the attribute is stored: the shortest exact spelling.
        return f"eps{str(np.float32(self.epsilon))}_st{self.stash_type}"


def make_skip_simplified_node(model: ir.Model, spec: SkipSimplifiedSpec, inputs: list,
                              name: str | None) -> ir.Node:
    """Creates (not inserts) the fused node, carrying its function body.

    ``inputs`` is ``[input, skip, gamma]`` or ``[input, skip, gamma, bias]``.
    Outputs 1 and 2 (mean, inv_std_var) are absent.
    """
    # Output 3 is always present, even when nothing reads it: serialization drops
    # trailing absent outputs, and onnx's function-call inference rejects a call
    # with fewer outputs than its function declares.
    outputs = [ir.Value(), ir.Value(name=""), ir.Value(name=""), ir.Value()]
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs,
                   attributes=[ir.AttrFloat32("epsilon", spec.epsilon)],
                   outputs=outputs, name=name)
    types = [v.type if v is not None else None for v in inputs]
    # The body depends on which optional inputs are present: part of the overload key.
    present = "".join("1" if v is not None else "0" for v in inputs)
    attach_function(model, node, lambda op, *args: _body(op, spec, *args), types,
                    f"{spec.overload}_in{present}")
    return node


def _body(op, spec: SkipSimplifiedSpec, input, skip, gamma, bias=None):
    total = op.Add(input, skip)
    if bias is not None:
        total = op.Add(total, bias)
    output = op.RMSNormalization(total, gamma, axis=-1, epsilon=spec.epsilon,
                                 stash_type=spec.stash_type)
    axes = op.Constant(value_ints=[-1])
    wide = op.Cast(total, to=ir.DataType.FLOAT)
    mean = op.ReduceMean(wide, axes, keepdims=1)
    eps = op.Constant(value=ir.tensor(np.array(spec.epsilon, dtype=np.float32)))
    mean_square = op.ReduceMean(op.Mul(wide, wide), axes, keepdims=1)
    inv_std_var = op.Reciprocal(op.Sqrt(op.Add(mean_square, eps)))
    return output, mean, inv_std_var, total
