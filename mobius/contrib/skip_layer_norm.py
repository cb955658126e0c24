"""com.microsoft SkipLayerNormalization and its standard-ONNX body.

    output, mean, inv_std_var, input_skip_bias_sum =
        SkipLayerNormalization(input, skip, gamma[, beta[, bias]], epsilon=eps)

is ``s = input + skip (+ bias)``, ``output, mean, inv_std_var =
LayerNormalization(s, gamma, beta)`` over the last axis. The kernels
accumulate in float32 (``stash_type=1``); the body carries the ``stash_type``
of the norm it was fused from (part of the overload key), so inlining
reproduces the original graph exactly. mobius leaves ``mean`` / ``inv_std_var``
absent on the node.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "SkipLayerNormalization"
INPUT_NAMES = ("input", "skip", "gamma", "beta", "bias")
OUTPUT_NAMES = ("output", "mean", "inv_std_var", "input_skip_bias_sum")


@dataclasses.dataclass(frozen=True)
class SkipLayerNormSpec:
    epsilon: float
    stash_type: int = 1

    @property
    def overload(self) -> str:
        # float32, as the attribute is stored: the shortest exact spelling.
        return f"eps{str(np.float32(self.epsilon))}_st{self.stash_type}"


def make_skip_layer_norm_node(model: ir.Model, spec: SkipLayerNormSpec, inputs: list,
                              name: str | None) -> ir.Node:
    """Creates (not inserts) the fused node, carrying its function body.

    ``inputs`` is ``[input, skip, gamma]``, ``[input, skip, gamma, beta]`` (beta
    may be None) or ``[input, skip, gamma, beta, bias]``. Outputs 1 and 2
    (mean, inv_std_var) are absent.
    """
    # Output 3 is always present, even when nothing reads it: serialization drops
    # trailing absent outputs, and onnx's function-call inference rejects a call
    # with fewer outputs than its function declares.
    outputs = [ir.Value(), ir.Value(name=""), ir.Value(name=""), ir.Value()]
    while inputs and inputs[-1] is None:
        inputs = inputs[:-1]
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs,
                   attributes=[ir.AttrFloat32("epsilon", spec.epsilon)],
                   outputs=outputs, name=name)
    types = [v.type if v is not None else None for v in inputs]
    # The body depends on which optional inputs are present: part of the overload key.
    present = "".join("1" if v is not None else "0" for v in inputs)
    attach_function(model, node, lambda op, *args: _body(op, spec, *args), types,
                    f"{spec.overload}_in{present}")
    return node


def _body(op, spec: SkipLayerNormSpec, input, skip, gamma, beta=None, bias=None):
    total = op.Add(input, skip)
    if bias is not None:
        total = op.Add(total, bias)
    output, mean, inv_std_var = op.LayerNormalization(
        total, gamma, beta, axis=-1, epsilon=spec.epsilon, stash_type=spec.stash_type, _outputs=3
    )
    return output, mean, inv_std_var, total
