"""Sparse mixture of experts (Mixtral, Qwen2/3-MoE), in standard ONNX.

    logits  = router(x)                                     [..., E]
    probs   = softmax(float32(logits))                      (as transformers: in float32)
    chosen  = probs >= (k-th largest of probs)              the top-k experts per token
    routing = where(chosen, probs, 0) [/ its sum if normalized]     dense [..., E], float32
    y       = sum_e routing[..., e] * expert_e(x)           only over tokens that chose e,
                                                            accumulated in float32
            (+ sigmoid(shared_gate(x)) * shared_expert(x))  Qwen2-MoE style, optional

Experts are computed sparsely: for each expert, the tokens that routed to it
are gathered (NonZero -> GatherND), run through its SiLU-gated MLP, weighted
and scatter-added back (ScatterND, reduction="add"), so the work grows with
k, not with the number of experts (in a decode step, experts nobody chose
run on zero rows and read no weights).

The routing is the dense [..., E] matrix of top-k weights (zero elsewhere):
no expert indices flow through the graph, only TopK's values. Ties at the
k-th value (measure zero with float32 router probabilities) would select
more than k experts.

Each expert's weights are separate Linears named as in the checkpoints
(``experts.{j}.gate_proj`` / Mixtral's ``experts.{j}.w1`` ...), so they bind
without a rename table. Fusing this pattern into com.microsoft MoE (where the
EP has the kernel) is the rewrite rule mobius/rewrite/moe_fusion.py; its
function body (mobius/contrib/moe.py) reuses :func:`routing_weights` and
:func:`combine_experts` below, so an inlined MoE is this same routing.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.activations import apply_activation
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype

#: Attribute names of (gate, up, down) in transformers' per-expert checkpoints.
QWEN_EXPERT_NAMES = ("gate_proj", "up_proj", "down_proj")
MIXTRAL_EXPERT_NAMES = ("w1", "w3", "w2")

ExpertFn = Callable[..., ir.Value]  # (op, rows [n, hidden]) -> [n, hidden]


def _scalar(op, value: float, dtype: ir.DataType):
    return op.Constant(value=ir.tensor(np.array(value, dtype=numpy_dtype(dtype))))


def routing_weights(op, logits, top_k: int, normalize: bool, dtype: ir.DataType):
    """Router logits [..., E] in ``dtype`` -> dense top-k routing weights [..., E], float32.

    softmax -> keep the top-k probabilities (others 0) -> optionally divide by
    their sum, all in float32 as transformers does.
    """
    if dtype != ir.DataType.FLOAT:
        logits = op.Cast(logits, to=ir.DataType.FLOAT)
    probs = op.Softmax(logits, axis=-1)
    top_values, _ = op.TopK(probs, op.Constant(value_ints=[top_k]), axis=-1, _outputs=2)
    kth = op.ReduceMin(top_values, op.Constant(value_ints=[-1]), keepdims=1)
    chosen = op.Where(op.GreaterOrEqual(probs, kth), probs, _scalar(op, 0.0, ir.DataType.FLOAT))
    if normalize:
        chosen = op.Div(chosen, op.ReduceSum(chosen, op.Constant(value_ints=[-1]), keepdims=1))
    return chosen


def combine_experts(op, x, routing, experts: Sequence[ExpertFn], dtype: ir.DataType):
    """sum_e routing[..., e] * experts[e](x), each expert run only on its tokens.

    x: [..., hidden] in ``dtype``; routing: [..., E] float32 (zero = not routed).
    Weighting and accumulation run in float32 (ScatterND's "add" reduction has
    no float16 kernel on onnxruntime's CPU EP); the result is cast back.
    """
    f32 = ir.DataType.FLOAT
    out = op.ConstantOfShape(op.Shape(x), value=ir.tensor(np.zeros(1, np.float32)))
    zero = _scalar(op, 0.0, f32)
    last = op.Constant(value_ints=[-1])
    for e, expert in enumerate(experts):
        weight = op.Gather(routing, op.Constant(value_int=e), axis=-1)  # [...]
        index = op.Transpose(op.NonZero(op.Greater(weight, zero)), perm=[1, 0])  # [n, rank-1]
        rows = expert(op, op.GatherND(x, index))  # [n, hidden]
        if dtype != f32:
            rows = op.Cast(rows, to=f32)
        rows = op.Mul(rows, op.Unsqueeze(op.GatherND(weight, index), last))
        out = op.ScatterND(out, index, rows, reduction="add")
    if dtype != f32:
        out = op.Cast(out, to=dtype)
    if x.shape is not None:  # ConstantOfShape(Shape(x)) hides it from shape inference
        out.shape = x.shape.copy()
    return out


@dataclasses.dataclass(frozen=True)
class SwiGlu:
    """act = g * sigmoid(alpha * g) * (u + beta), after clamping g <= limit, |u| <= limit.

    The defaults (1, 0, no limit) are SiLU(g) * u; gpt-oss: alpha 1.702, beta 1, limit 7.
    These are com.microsoft MoE's activation_alpha / activation_beta / swiglu_limit.
    """

    alpha: float = 1.0
    beta: float = 0.0
    limit: float | None = None


def swiglu(op, gate_up, inter: int, act: SwiGlu, dtype: ir.DataType):
    """Interleaved [n, 2I] (g0, u0, g1, u1, ...) -> [n, I] by ``act``."""
    pairs = op.Reshape(gate_up, op.Constant(value_ints=[-1, inter, 2]))
    gate = op.Gather(pairs, op.Constant(value_int=0), axis=-1)
    up = op.Gather(pairs, op.Constant(value_int=1), axis=-1)
    if act.limit is not None:
        gate = op.Min(gate, _scalar(op, act.limit, dtype))
        up = op.Clip(up, _scalar(op, -act.limit, dtype), _scalar(op, act.limit, dtype))
    sigmoid_in = gate if act.alpha == 1.0 else op.Mul(gate, _scalar(op, act.alpha, dtype))
    if act.beta:
        up = op.Add(up, _scalar(op, act.beta, dtype))
    return op.Mul(op.Mul(gate, op.Sigmoid(sigmoid_in)), up)


def stacked_expert(e: int, w1, b1, w2, b2, inter: int, act: SwiGlu, dtype: ir.DataType, *,
                   out_in: bool) -> ExpertFn:
    """Expert ``e`` of stacked weights: w1 [E, H, 2I] (interleaved gate/up), w2 [E, I, H],
    biases b1 [E, 2I] / b2 [E, H] or None; ``out_in``: w1/w2 are [E, 2I, H] / [E, H, I]
    (com.microsoft MoE's layout) and are transposed per expert."""

    def weight(op, stacked, index):
        w = op.Gather(stacked, index, axis=0)
        return op.Transpose(w, perm=[1, 0]) if out_in else w

    def run(op, rows):  # rows [n, hidden]
        index = op.Constant(value_int=e)
        gate_up = op.MatMul(rows, weight(op, w1, index))
        if b1 is not None:
            gate_up = op.Add(gate_up, op.Gather(b1, index, axis=0))
        out = op.MatMul(swiglu(op, gate_up, inter, act, dtype), weight(op, w2, index))
        if b2 is not None:
            out = op.Add(out, op.Gather(b2, index, axis=0))
        return out

    return run


class GatedExpert(nn.Module):
    """down(act(gate(x)) * up(x)) with checkpoint attribute names ``names`` = (gate, up, down)."""

    def __init__(self, hidden_size: int, intermediate_size: int, activation: str = "silu",
                 names: Sequence[str] = QWEN_EXPERT_NAMES):
        super().__init__()
        self.activation = activation
        self.names = tuple(names)
        gate, up, down = self.names
        setattr(self, gate, Linear(hidden_size, intermediate_size))
        setattr(self, up, Linear(hidden_size, intermediate_size))
        setattr(self, down, Linear(intermediate_size, hidden_size))

    def forward(self, op, x):
        gate, up, down = (getattr(self, name) for name in self.names)
        hidden = op.Mul(apply_activation(op, gate(op, x), self.activation), up(op, x))
        return down(op, hidden)


class SparseMoE(nn.Module):
    """Router ``gate`` + ``experts`` (+ optional ``shared_expert`` / ``shared_expert_gate``).

    Args:
        normalize_top_k: divide the top-k weights by their sum (Mixtral: always;
            Qwen-MoE: ``norm_topk_prob``).
        expert_names: checkpoint names of each expert's (gate, up, down).
        shared_expert_size: intermediate size of an always-on shared expert
            whose output is scaled by sigmoid(shared_expert_gate(x)) (Qwen2-MoE).
    """

    def __init__(self, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int,
                 *, normalize_top_k: bool = True, activation: str = "silu",
                 expert_names: Sequence[str] = QWEN_EXPERT_NAMES,
                 shared_expert_size: int | None = None):
        super().__init__()
        if not 0 < top_k <= num_experts:
            raise ValueError(f"top_k must be in 1..{num_experts}, got {top_k}")
        self.num_experts = num_experts
        self.top_k = top_k
        self.normalize_top_k = normalize_top_k
        self.dtype = get_build_dtype()  # the dtype the weights are created in
        self.gate = Linear(hidden_size, num_experts)
        self.experts = nn.ModuleList([
            GatedExpert(hidden_size, intermediate_size, activation, expert_names)
            for _ in range(num_experts)
        ])
        self.shared_expert = None
        self.shared_expert_gate = None
        if shared_expert_size:
            self.shared_expert = GatedMLP(hidden_size, shared_expert_size, activation)
            self.shared_expert_gate = Linear(hidden_size, 1)

    def forward(self, op, x):
        dtype = self.dtype
        routing = routing_weights(op, self.gate(op, x), self.top_k, self.normalize_top_k, dtype)
        out = combine_experts(op, x, routing, list(self.experts), dtype)
        if self.shared_expert is not None:
            shared = op.Mul(op.Sigmoid(self.shared_expert_gate(op, x)), self.shared_expert(op, x))
            out = op.Add(out, shared)
        return out
