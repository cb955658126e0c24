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

gpt-oss's experts use the same op with biases (fc1_experts_bias [E, 2I], interleaved
like fc1's rows; fc2_experts_bias [E, H]) and the clamped SwiGLU
(activation_alpha 1.702, activation_beta 1, swiglu_limit 7: gate clamped above, up
on both sides), checked against onnxruntime 1.32's CPU kernel in
mobius/rewrite/moe_fusion_test.py.

The body is mobius.components.moe's routing (the same functions the
component emits) over per-expert slices of the stacked weights, so an
inlined MoE computes exactly what the generic graph did.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.components.moe import SwiGlu, combine_experts, routing_weights, stacked_expert
from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "MoE"
INPUT_NAMES = ("input", "router_probs", "fc1_experts_weights", "fc1_experts_bias",
               "fc2_experts_weights", "fc2_experts_bias")


@dataclasses.dataclass(frozen=True)
class MoeSpec:
    num_experts: int
    hidden_size: int
    inter_size: int
    top_k: int
    normalize: bool
    dtype: ir.DataType
    act: SwiGlu = SwiGlu()
    bias: bool = False  # fc1_experts_bias / fc2_experts_bias are given

    @property
    def overload(self) -> str:
        act = self.act
        # exact floats: the body bakes them in, and bodies are shared by overload
        extra = "" if act == SwiGlu() else f"_a{act.alpha!r}_b{act.beta!r}_l{act.limit!r}"
        return (f"e{self.num_experts}_h{self.hidden_size}_i{self.inter_size}_k{self.top_k}"
                f"_n{int(self.normalize)}_{self.dtype.name.lower()}{extra}"
                f"{'_bias' if self.bias else ''}")

    def attributes(self) -> dict:
        attributes = {"k": self.top_k, "normalize_routing_weights": int(self.normalize),
                      "activation_type": "swiglu", "swiglu_fusion": 1,
                      "activation_alpha": float(self.act.alpha),
                      "activation_beta": float(self.act.beta), "use_sparse_mixer": 0}
        if self.act.limit is not None:
            attributes["swiglu_limit"] = float(self.act.limit)
        return attributes

    @classmethod
    def from_node(cls, node: ir.Node, num_experts: int, hidden: int, inter: int,
                  dtype: ir.DataType) -> "MoeSpec":
        """The spec of an MoE node mobius emitted (attributes as :meth:`attributes` writes)."""
        attrs = {name: a.value for name, a in node.attributes.items()}
        act = SwiGlu(float(attrs.get("activation_alpha", 1.0)),
                     float(attrs.get("activation_beta", 0.0)), attrs.get("swiglu_limit"))
        bias = len(node.inputs) > 3 and node.inputs[3] is not None
        return cls(num_experts, hidden, inter, int(attrs["k"]),
                   bool(attrs.get("normalize_routing_weights", 0)), dtype, act, bias)


def make_moe_node(model: ir.Model, spec: MoeSpec, inputs: list, name: str) -> ir.Node:
    """Creates (not inserts) an MoE node that carries its function body.

    inputs: [input, router_logits, fc1 [E, 2I, H] interleaved, fc1 bias [E, 2I] or None,
    fc2 [E, H, I] (, fc2 bias [E, H])].
    """
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, attributes=ir.convenience.convert_attributes(
        spec.attributes()), num_outputs=1, name=name)
    types = [v.type if v is not None else None for v in inputs]
    attach_function(model, node, lambda op, *args: moe_body(op, spec, *args), types, spec.overload)
    return node


def moe_body(op, spec: MoeSpec, x, router_logits, fc1, fc1_bias=None, fc2=None, fc2_bias=None):
    """The standard-op MoE over float stacked weights (also QMoE's, after dequantizing).

    Transpose(Gather(initializer, e)) is constant: runtimes fold it to the
    expert's [in, out] MatMul weight, as in the generic graph.
    """
    h, i = spec.hidden_size, spec.inter_size
    tokens = op.Reshape(x, op.Constant(value_ints=[-1, h]))
    routing = routing_weights(op, router_logits, spec.top_k, spec.normalize, spec.dtype)
    experts = [stacked_expert(e, fc1, fc1_bias, fc2, fc2_bias, i, spec.act, spec.dtype,
                              out_in=True) for e in range(spec.num_experts)]
    out = combine_experts(op, tokens, routing, experts, spec.dtype)
    return op.Reshape(out, op.Shape(x))


def times_top_k_mass(moe: ir.Node, logits: ir.Value, top_k: int,
                     dtype: ir.DataType) -> list[ir.Node]:
    """Nodes computing moe's output * sum(top-k softmax(logits)) [..., 1] (float32 routing).

    A renormalizing MoE times this mass is the MoE without renormalization (the
    expert sum is linear in the routing weights). onnxruntime's QMoE always
    renormalizes, and onnxruntime 1.30's CPU MoE kernel (onnxruntime-node's newest)
    gave wrong outputs for exactly the unnormalized routings (``normalize_routing_weights``
    = 0; testing/js:ort_js_test), so those are built this way."""
    name = moe.name
    nodes = []

    def add(op_type, inputs, n_out=1, **attrs):
        node = ir.Node("", op_type, inputs, attributes=[_attr(k, v) for k, v in attrs.items()],
                       num_outputs=n_out, name=f"{name}/mass/{op_type}_{len(nodes)}")
        nodes.append(node)
        return node.outputs

    def const(array):
        return add("Constant", [], value=ir.tensor(array))[0]

    f32 = ir.DataType.FLOAT
    routed = logits if dtype == f32 else add("Cast", [logits], to=f32)[0]
    probs = add("Softmax", [routed], axis=-1)[0]
    top = add("TopK", [probs, const(np.array([top_k], np.int64))], 2, axis=-1)[0]
    mass = add("ReduceSum", [top, const(np.array([-1], np.int64))], keepdims=1)[0]
    if dtype != f32:
        mass = add("Cast", [mass], to=dtype)[0]
    add("Mul", [moe.outputs[0], mass])
    return nodes


def _attr(name: str, value) -> ir.Attr:
    if isinstance(value, ir.TensorProtocol):
        return ir.AttrTensor(name, value)
    return ir.AttrInt64(name, int(value))
