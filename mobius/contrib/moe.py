"""com.microsoft MoE (SiLU-gated experts, as mobius fuses it) and its standard-ONNX body.

The form mobius emits (mobius/rewrite/moe_fusion.py) is the one onnxruntime's
CPU and CUDA kernels share (onnxruntime 1.32; the CPU kernel has no FC3 and
only the interleaved SwiGLU layout):

    input                [..., hidden]  (2-D tokens or 3-D [batch, seq, hidden])
    router_probs         [tokens, E]    router *logits*; the kernel applies the softmax
    fc1_experts_weights  [E, 2*I, hidden]  gate/up rows interleaved: g0, u0, g1, u1, ...
    fc2_experts_weights  [E, hidden, I]
    activation_type="swiglu", swiglu_fusion=1, activation_alpha=1, activation_beta=0,
    no swiglu_limit  ->  act = g * sigmoid(g) * u = silu(g) * u
    k, normalize_routing_weights: softmax over all E, top-k, optional renormalization.

The body is mobius.components.moe's routing (the same functions the
component emits) over per-expert slices of the stacked weights, so an
inlined MoE computes exactly what the generic graph did.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.components.moe import combine_experts, routing_weights
from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "MoE"
INPUT_NAMES = ("input", "router_probs", "fc1_experts_weights", "fc1_experts_bias",
               "fc2_experts_weights")


@dataclasses.dataclass(frozen=True)
class MoeSpec:
    num_experts: int
    hidden_size: int
    inter_size: int
    top_k: int
    normalize: bool
    dtype: ir.DataType

    @property
    def overload(self) -> str:
        return (f"e{self.num_experts}_h{self.hidden_size}_i{self.inter_size}_k{self.top_k}"
                f"_n{int(self.normalize)}_{self.dtype.name.lower()}")

    def attributes(self) -> dict:
        return {"k": self.top_k, "normalize_routing_weights": int(self.normalize),
                "activation_type": "swiglu", "swiglu_fusion": 1,
                "activation_alpha": 1.0, "activation_beta": 0.0, "use_sparse_mixer": 0}


def make_moe_node(model: ir.Model, spec: MoeSpec, inputs: list, name: str) -> ir.Node:
    """Creates (not inserts) an MoE node that carries its function body.

    inputs: [input, router_logits, fc1 [E, 2I, H] interleaved, None, fc2 [E, H, I]].
    """
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, attributes=ir.convenience.convert_attributes(
        spec.attributes()), num_outputs=1, name=name)
    types = [v.type if v is not None else None for v in inputs]
    attach_function(model, node, lambda op, *args: moe_body(op, spec, *args), types, spec.overload)
    return node


def moe_body(op, spec: MoeSpec, x, router_logits, fc1, fc1_bias=None, fc2=None):
    """The standard-op MoE over float stacked weights (also QMoE's, after dequantizing)."""
    h, i = spec.hidden_size, spec.inter_size
    tokens = op.Reshape(x, op.Constant(value_ints=[-1, h]))
    routing = routing_weights(op, router_logits, spec.top_k, spec.normalize, spec.dtype)

    def expert(e: int):
        def run(op, rows):  # rows [n, hidden]
            # Transpose(Gather(initializer, e)) is constant: runtimes fold it to the
            # expert's [in, out] MatMul weight, as in the generic graph.
            index = op.Constant(value_int=e)
            w1 = op.Transpose(op.Gather(fc1, index, axis=0), perm=[1, 0])  # [H, 2I]
            gate_up = op.Reshape(op.MatMul(rows, w1), op.Constant(value_ints=[-1, i, 2]))
            gate = op.Gather(gate_up, op.Constant(value_int=0), axis=-1)
            up = op.Gather(gate_up, op.Constant(value_int=1), axis=-1)
            hidden = op.Mul(op.Mul(gate, op.Sigmoid(gate)), up)
            w2 = op.Transpose(op.Gather(fc2, index, axis=0), perm=[1, 0])  # [I, H]
            return op.MatMul(hidden, w2)  # [n, hidden]

        return run

    out = combine_experts(op, tokens, routing, [expert(e) for e in range(spec.num_experts)],
                          spec.dtype)
    return op.Reshape(out, op.Shape(x))
