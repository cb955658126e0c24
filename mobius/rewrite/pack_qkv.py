"""Fuse: three Q/K/V projections of one input feeding GroupQueryAttention -> one packed MatMul.

Pattern (what GroupQueryAttentionFusion leaves when RoPE is absorbed or absent):
    q = MatMul(x, Wq) [+ bq];  k = MatMul(x, Wk) [+ bk];  v = MatMul(x, Wv) [+ bv]
    GroupQueryAttention(q, k, v, past_k, past_v, ...)
with constant weights W* [hidden, n*D] (n = num_heads for q, kv_num_heads for k/v).
Rewrite:
    qkv = MatMul(x, concat(Wq, Wk, Wv, axis=1)) [+ concat(bq, bk, bv)]
    GroupQueryAttention(qkv, <empty>, <empty>, past_k, past_v, ...)    packed_qkv
The packed weight/bias are lazy initializers whose function concatenates the
parts when the saver asks for the data, so nothing is read while optimizing;
the saver computes each part straight into its columns of the mapped data
file (weights/mapped_write.py).

Not packed (left unchanged): RoPE applied outside GQA (RotaryEmbedding nodes
between the MatMuls and GQA, i.e. the EP has no fused RoPE). Packing there
would need a Split before the rotations, which saves nothing over the three
MatMuls the EP gets today. Also left alone: different inputs, non-constant
weights or graph-input weights, bias on only some of q/k/v, projections read
by anything besides the GQA.
Legal for the decoder role where ``caps.packs_qkv(dtype)``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.contrib.group_query_attention import GqaSpec, retarget_gqa_node, spec_from_node
from mobius.rewrite.rule import NodeRule, Rejected, RuleContext, producer, sole_consumer
from mobius.weights.mapped_write import FillableTensor, fill_into
from mobius.roles import DECODER


@dataclasses.dataclass
class Projection:
    """One of q/k/v: ``out = MatMul(x, weight) [+ bias]``."""

    matmul: ir.Node
    weight: ir.Value
    bias: ir.Value | None
    out: ir.Value

    @property
    def input(self) -> ir.Value:
        return self.matmul.inputs[0]


@dataclasses.dataclass
class _Match:
    gqa: ir.Node
    spec: GqaSpec
    q: Projection
    k: Projection
    v: Projection


class PackQKV(NodeRule):
    name = "PackQKV"
    stage = "fuse"
    order = 20

    def applies(self, ctx: RuleContext) -> bool:
        return ctx.role == DECODER and ctx.caps.packs_qkv(ctx.dtype)

    def match(self, node: ir.Node) -> _Match | None:
        spec = spec_from_node(node)
        if spec is None or spec.packed_qkv or len(node.inputs) < 3:
            return None
        sides = [projection(value, node) for value in node.inputs[:3]]
        if any(side is None for side in sides):
            return None
        return _Match(node, spec, *sides)

    def check(self, match: _Match, ctx: RuleContext) -> bool | Rejected:
        q, k, v = match.q, match.k, match.v
        x = q.input
        if x is None or k.input is not x or v.input is not x:
            return Rejected("Q, K and V are not projections of one input")
        if (q.bias is None) != (k.bias is None) or (q.bias is None) != (v.bias is None):
            return Rejected("only some of Q, K and V have a bias")
        spec = match.spec
        widths = (spec.num_heads * spec.head_dim, spec.kv_num_heads * spec.head_dim,
                  spec.kv_num_heads * spec.head_dim)
        weights = [q.weight, k.weight, v.weight]
        if len({w.const_value.dtype for w in weights}) != 1:
            return Rejected("the projection weights differ in dtype")
        if any(tuple(w.shape) != (weights[0].shape[0], n) for w, n in zip(weights, widths)):
            return Rejected(f"weight shapes {[tuple(w.shape) for w in weights]} are not "
                            f"[hidden, {list(widths)}]")
        if q.bias is not None:
            biases = [q.bias, k.bias, v.bias]
            if any(tuple(b.shape) != (n,) for b, n in zip(biases, widths)):
                return Rejected("bias shapes do not match the projections' widths")
            if {b.const_value.dtype for b in biases} != {weights[0].const_value.dtype}:
                return Rejected("the biases' dtype differs from the weights'")
        return True

    def rewrite(self, model: ir.Model, match: _Match, ctx: RuleContext) -> None:
        graph = model.graph
        q, k, v = match.q, match.k, match.v
        weight = lazy_initializer(graph, packed_name(q.weight.name, "weight"),
                                  concat_loader([q.weight.const_value, k.weight.const_value,
                                                 v.weight.const_value], axis=1),
                                  q.weight.const_value.dtype,
                                  [q.weight.shape[0], sum(p.weight.shape[1] for p in (q, k, v))])
        matmul = ir.Node("", "MatMul", [q.input, weight], name=_derived_name(q.matmul, "qkv"))
        new_nodes = [matmul]
        packed = matmul.outputs[0]
        if q.bias is not None:
            bias = lazy_initializer(graph, packed_name(q.bias.name, "bias"),
                                    concat_loader([q.bias.const_value, k.bias.const_value,
                                                   v.bias.const_value], axis=0),
                                    q.bias.const_value.dtype,
                                    [sum(p.bias.shape[0] for p in (q, k, v))])
            add = ir.Node("", "Add", [packed, bias], name=_derived_name(q.matmul, "qkv_bias"))
            new_nodes.append(add)
            packed = add.outputs[0]
        packed.type = q.out.type
        if q.out.shape is not None and len(q.out.shape) == 3:
            packed.shape = ir.Shape([q.out.shape[0], q.out.shape[1], weight.shape[1]])
        graph.insert_before(match.gqa, new_nodes)
        spec = dataclasses.replace(match.spec, packed_qkv=True)
        inputs = [packed, None, None, *match.gqa.inputs[3:]]
        retarget_gqa_node(model, match.gqa, spec, inputs)


def projection(value: ir.Value | None, reader: ir.Node) -> Projection | None:
    """``value`` as MatMul(x, W) [+ b] with constant W [in, out] (and b [out]), read only by ``reader``."""
    if value is None or sole_consumer(value) is not reader:
        return None
    bias = None
    node = producer(value, "Add")
    if node is not None:
        for i in (0, 1):
            matmul = producer(node.inputs[i], "MatMul")
            other = node.inputs[1 - i]
            if matmul is not None and _constant(other, rank=1):
                bias = other
                break
        else:
            return None
        if sole_consumer(matmul.outputs[0]) is not node:
            return None
    else:
        matmul = producer(value, "MatMul")
        if matmul is None:
            return None
    weight = matmul.inputs[1]
    if not _constant(weight, rank=2):
        return None
    return Projection(matmul, weight, bias, value)


def _constant(value: ir.Value | None, rank: int) -> bool:
    """An initializer (not overridable as a graph input) with a static shape of ``rank``."""
    return (value is not None and value.is_initializer() and not value.is_graph_input()
            and value.const_value is not None and value.shape is not None
            and len(value.shape) == rank and all(isinstance(d, int) for d in value.shape))


#: key of a packed tensor's ``meta`` holding its concat_loader (parts and axis), so later
#: passes can see what it is made of (e.g. GPTQ / AWQ integers behind each part)
CONCAT_OF = "mobius.concat_of"


class concat_loader:  # noqa: N801 - used like a function
    """The function of a lazy packed tensor: concatenates its parts when evaluated."""

    def __init__(self, parts: list[ir.TensorProtocol], axis: int):
        self.parts = list(parts)
        self.axis = axis

    def __call__(self) -> ir.TensorProtocol:
        dtype = self.parts[0].dtype
        array = np.concatenate([part.numpy() for part in self.parts], axis=self.axis)
        return ir.Tensor(array, dtype=dtype)

    def fill(self, out: np.ndarray) -> None:
        """Writes the concatenation into ``out``: each part straight into its slice."""
        start = 0
        for part in self.parts:
            index = [slice(None)] * out.ndim
            index[self.axis] = slice(start, start + part.shape[self.axis])
            fill_into(part, out[tuple(index)])
            start += part.shape[self.axis]


def lazy_initializer(graph: ir.Graph, name: str, func, dtype: ir.DataType, shape) -> ir.Value:
    """Registers an initializer backed by ``ir.LazyTensor(func)`` under a fresh name."""
    name = _fresh_name(graph, name)
    fill = func.fill if isinstance(func, concat_loader) else None
    tensor = FillableTensor(func, dtype, ir.Shape(shape), name=name, fill=fill)
    if isinstance(func, concat_loader):
        tensor.meta[CONCAT_OF] = func
    value = ir.Value(name=name, type=ir.TensorType(dtype), shape=ir.Shape(shape),
                     const_value=tensor)
    graph.register_initializer(value)
    return value


def packed_name(q_name: str | None, kind: str) -> str:
    """model.layers.0.self_attn.q_proj.weight -> model.layers.0.self_attn.qkv_proj.weight."""
    q_name = q_name or f"qkv_{kind}"
    if "q_proj" in q_name:
        return q_name.replace("q_proj", "qkv_proj")
    return f"{q_name}.qkv_packed"


def _fresh_name(graph: ir.Graph, name: str) -> str:
    candidate, i = name, 1
    while candidate in graph.initializers:
        candidate = f"{name}.{i}"
        i += 1
    return candidate


def _derived_name(node: ir.Node, suffix: str) -> str | None:
    return f"{node.name}/{suffix}" if node.name else None
