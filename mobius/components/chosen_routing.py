"""Routing whose expert choice is not its weights, in the form com.microsoft MoE fuses.

ERNIE-4.5-MoE chooses experts by softmax(s) + a correction bias and weights
them by softmax(s) alone; GLM-4-MoE chooses by sigmoid(s) + a bias within the
best expert groups and weights by sigmoid(s). The MoE kernel only computes
softmax top-k. Given the choice (a boolean [..., E] mask of exactly k experts)
and positive weights w, the kernel's routing over

    r = Where(chosen, log w, -inf)

is softmax(r) = w / sum(chosen w) on the chosen experts and 0 elsewhere, so its
top k are the chosen experts with their weights renormalized. The routed
output, linear in the weights, is then multiplied per token by what the
family's own normalization differs from that (ERNIE: sum / max(sum, norm_min);
GLM without norm_topk_prob: sum). ``r`` is built with
:func:`mobius.components.moe.routing_weights`, the pattern
mobius/rewrite/moe_fusion.py fuses, so an EP with the kernel runs it fused and
every other EP runs the same routing in standard ops.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.components.moe import routing_weights
from mobius.weights.dtypes import numpy_dtype

F32 = ir.DataType.FLOAT


def constant(op, value: float, dtype: ir.DataType = F32):
    return op.Constant(value=ir.tensor(np.array(value, dtype=numpy_dtype(dtype))))


def kth_largest(op, values, k: int):
    """The k-th largest of ``values`` along the last axis, keepdims."""
    top, _ = op.TopK(values, op.Constant(value_ints=[k]), axis=-1, _outputs=2)
    return op.ReduceMin(top, op.Constant(value_ints=[-1]), keepdims=1)


def chosen_routing(op, log_weights, chosen, top_k: int, dtype: ir.DataType):
    """Dense float32 routing [..., E]: the chosen experts' weights renormalized to sum 1.

    log_weights: [..., E] in ``dtype``, log of the weights up to a per-token
    constant (router logits for softmax weights); chosen: [..., E] bool, ``top_k``
    per token.
    """
    minus_inf = constant(op, float("-inf"), dtype)
    return routing_weights(op, op.Where(chosen, log_weights, minus_inf), top_k, True, dtype)


def chosen_sum(op, weights, chosen):
    """sum over the chosen experts of ``weights`` (float32), keepdims: [..., 1]."""
    kept = op.Where(chosen, weights, constant(op, 0.0))
    return op.ReduceSum(kept, op.Constant(value_ints=[-1]), keepdims=1)


def scale_tokens(op, out, factor, dtype: ir.DataType):
    """out [..., H] (``dtype``) times a float32 per-token factor [..., 1]."""
    if dtype != F32:
        factor = op.Cast(factor, to=dtype)
    return op.Mul(out, factor)
