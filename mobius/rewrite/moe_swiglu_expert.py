"""MoEFusion's pattern piece for experts with biases and a parametrized SwiGLU (gpt-oss).

What mobius.components.moe.stacked_expert emits for expert e (out_in=False):

    gate_up = MatMul(xe, W1_e) [+ b1_e]                       W1_e [H, 2I], interleaved g/u
    pairs   = Reshape(gate_up, [-1, I, 2]);  g = pairs[..., 0];  u = pairs[..., 1]
    g = Min(g, limit);  u = Clip(u, -limit, limit)             (only with a limit)
    act     = Mul(Mul(g, Sigmoid([Mul](g, alpha))), [Add](u, beta))
    rows    = MatMul(act, W2_e) [+ b2_e]                       W2_e [I, H]

Each weight/bias is ``Gather(stacked initializer, e, axis=0)`` or, once constant
folding has run on a small one, a constant of its own; either way
:class:`Slice` reads expert e's array at save time, never while optimizing.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir

from mobius.components.moe import SwiGlu
from mobius.rewrite.rule import attr, initializer_array, producer


@dataclasses.dataclass(frozen=True)
class Slice:
    """Expert ``expert``'s slice of ``value`` (a stacked [E, ...] constant), or all of a
    per-expert constant (``expert`` None)."""

    value: ir.Value
    expert: int | None

    @property
    def shape(self) -> tuple:
        shape = tuple(self.value.shape)
        return shape if self.expert is None else shape[1:]

    def array(self) -> np.ndarray:
        tensor = self.value.const_value
        if tensor is None:
            raise ValueError(f"{self.value.name}: an expert weight it stacks has no data")
        if self.expert is None:
            return tensor.numpy()
        read_rows = getattr(tensor, "read_rows", None)
        if read_rows is not None:  # a checkpoint tensor: this expert's rows alone, not E copies
            return read_rows(self.expert, self.expert + 1)[0]
        return tensor.numpy()[self.expert]


@dataclasses.dataclass
class SwigluExpert:
    index: int
    w1: Slice  # [H, 2I]
    b1: Slice | None  # [2I]
    w2: Slice  # [I, H]
    b2: Slice | None  # [H]
    act: SwiGlu


def _scalar(value: ir.Value | None) -> float | None:
    array = initializer_array(value)
    if array is None or array.size != 1:
        return None
    return float(array.reshape(()))


def _source(value: ir.Value | None, expert: int, rank: int) -> Slice | None:
    """``value`` as expert ``expert``'s constant of rank ``rank`` (see module doc)."""
    if value is None:
        return None
    if value.const_value is not None and value.shape is not None and len(value.shape) == rank:
        return Slice(value, None) if all(isinstance(d, int) for d in value.shape) else None
    gather = producer(value, "Gather")
    if gather is None or attr(gather, "axis", 0) != 0:
        return None
    stacked, index = gather.inputs
    position = initializer_array(index)
    if (stacked.const_value is None or stacked.shape is None or len(stacked.shape) != rank + 1
            or position is None or position.ndim != 0 or int(position) != expert):
        return None
    return Slice(stacked, expert)


def _affine(value: ir.Value, expert: int):
    """(input, weight Slice, bias Slice or None) if value = MatMul(input, W) [+ b]."""
    bias = None
    add = producer(value, "Add")
    if add is not None:
        for out, b in (add.inputs, tuple(reversed(add.inputs))):
            bias = _source(b, expert, 1)
            if bias is not None and producer(out, "MatMul") is not None:
                value = out
                break
        else:
            return None
    matmul = producer(value, "MatMul")
    weight = _source(matmul.inputs[1], expert, 2) if matmul is not None else None
    if weight is None:
        return None
    return matmul.inputs[0], weight, bias


def _clamped(value: ir.Value, op_type: str):
    """(input, limit or None): value = Min(x, limit) / Clip(x, -limit, limit), or x itself."""
    node = producer(value, op_type)
    if node is None:
        return value, None
    if op_type == "Min" and len(node.inputs) == 2:
        return node.inputs[0], _scalar(node.inputs[1])
    if op_type == "Clip" and len(node.inputs) == 3:
        low, high = _scalar(node.inputs[1]), _scalar(node.inputs[2])
        if low is not None and high is not None and low == -high:
            return node.inputs[0], high
    return None, None


def _activation(act: ir.Value):
    """(gate_up, SwiGlu, inter) of the activation product, or None."""
    outer = producer(act, "Mul")
    if outer is None:
        return None
    for glu, up in (outer.inputs, tuple(reversed(outer.inputs))):
        inner = producer(glu, "Mul")
        if inner is None:
            continue
        gate, sigmoid = inner.inputs
        sig = producer(sigmoid, "Sigmoid")
        if sig is None:
            continue
        alpha = 1.0
        if sig.inputs[0] is not gate:
            scaled = producer(sig.inputs[0], "Mul")
            if scaled is None or scaled.inputs[0] is not gate:
                continue
            alpha = _scalar(scaled.inputs[1])
        beta = 0.0
        shifted = producer(up, "Add")
        if shifted is not None:
            up, beta = shifted.inputs[0], _scalar(shifted.inputs[1])
        parsed = _split(gate, up)
        if parsed is None or alpha is None or beta is None:
            continue
        gate_up, limit, inter = parsed
        return gate_up, SwiGlu(alpha, beta, limit), inter
    return None


def _split(gate: ir.Value, up: ir.Value):
    """(gate_up, limit, inter) if gate/up are the (clamped) even/odd halves of one tensor."""
    gate, gate_limit = _clamped(gate, "Min")
    up, up_limit = _clamped(up, "Clip")
    if gate is None or up is None or gate_limit != up_limit:
        return None
    picks = [producer(gate, "Gather"), producer(up, "Gather")]
    if any(p is None or attr(p, "axis", 0) not in (-1, 2) for p in picks):
        return None
    if picks[0].inputs[0] is not picks[1].inputs[0]:
        return None
    if [_scalar(p.inputs[1]) for p in picks] != [0.0, 1.0]:
        return None
    reshape = producer(picks[0].inputs[0], "Reshape")
    shape = initializer_array(reshape.inputs[1]) if reshape is not None else None
    if shape is None or shape.shape != (3,) or shape[0] != -1 or shape[2] != 2:
        return None
    return reshape.inputs[0], gate_limit, int(shape[1])


def swiglu_expert(rows: ir.Value, x: ir.Value, index: ir.Value, expert: int):
    """The :class:`SwigluExpert` computing ``rows`` from GatherND(x, index), or None."""
    down = _affine(rows, expert)
    if down is None:
        return None
    act, w2, b2 = down
    parsed = _activation(act)
    if parsed is None:
        return None
    gate_up, swiglu, inter = parsed
    up = _affine(gate_up, expert)
    if up is None:
        return None
    xe, w1, b1 = up
    gathered = producer(xe, "GatherND")
    if (gathered is None or gathered.inputs[0] is not x or gathered.inputs[1] is not index
            or attr(gathered, "batch_dims", 0)):
        return None
    hidden = w1.shape[0]
    if (w1.shape != (hidden, 2 * inter) or w2.shape != (inter, hidden)
            or (b1 is not None and b1.shape != (2 * inter,))
            or (b2 is not None and b2.shape != (hidden,))):
        return None
    return SwigluExpert(expert, w1, b1, w2, b2, swiglu)


def fc_loaders(experts: list[SwigluExpert]):
    """Loaders of MoE's fc1 [E, 2I, H], fc1 bias [E, 2I], fc2 [E, H, I], fc2 bias [E, H]
    (bias loaders None when the experts have none)."""

    def stack(pick, transpose: bool):
        def load(name: str):
            arrays = [pick(e).array() for e in experts]
            return np.stack([np.ascontiguousarray(a.T) if transpose else a for a in arrays])

        return load

    def bias(pick):
        return None if pick(experts[0]) is None else stack(pick, False)

    return (stack(lambda e: e.w1, True), bias(lambda e: e.b1),
            stack(lambda e: e.w2, True), bias(lambda e: e.b2))
