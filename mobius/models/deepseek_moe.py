"""DeepSeek-V2/V3 mixture of experts: grouped top-k routing, routed scaling, shared experts.

Routing, on router logits s [..., E] in float32 (transformers' DeepseekV2/V3TopkRouter):

* V2 ``greedy``: p = softmax(s); the top-k p.
* V2 ``group_limited_greedy``: p = softmax(s); the E experts form ``n_group``
  groups, a group scores max(p) over its experts, only the ``topk_group`` best
  groups compete; the top-k p among their experts.
* V3 (``noaux_tc``): p = sigmoid(s); the choice uses p + e_score_correction_bias,
  a group scores the sum of its two best choice values, the top-k choice values
  among the ``topk_group`` best groups pick the experts, which are weighted by p
  (not the biased value), renormalized when ``norm_topk_prob`` (sum + 1e-20).

Every weight is then multiplied by ``routed_scaling_factor``. Since the expert
sum is linear in the weights, the factor scales the routed output instead, so
V2's greedy routing stays the softmax top-k pattern that fuses into
com.microsoft MoE (mobius/rewrite/moe_fusion.py); the grouped and sigmoid
routings choose apart from their weights and are built in the fusable form of
mobius/components/chosen_routing.py (sigmoid weights as exp(-softplus(-s))),
so they fuse too. The output adds ``shared_experts`` (a gated MLP of
moe_intermediate_size * n_shared_experts).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components import chosen_routing as cr
from mobius.components.causal_transformer import scalar
from mobius.components.linear import Linear
from mobius.components.mlp import GatedMLP
from mobius.components.moe import GatedExpert, combine_experts, routing_weights
from mobius.components.weight import Weight
from mobius.context import get_build_dtype

F32 = ir.DataType.FLOAT


def _group_mask(op, choice, groups: int, keep: int, experts: int, per_group_top: int):
    """[..., E] bool: the experts of the ``keep`` best of ``groups`` groups, a group's
    score being the sum of its ``per_group_top`` largest ``choice`` values (V2: 1 = max)."""
    size = experts // groups
    grouped = op.Reshape(choice, op.Constant(value_ints=[0, 0, groups, size]))
    top, _ = op.TopK(grouped, op.Constant(value_ints=[per_group_top]), axis=-1, _outputs=2)
    score = op.ReduceSum(top, op.Constant(value_ints=[-1]), keepdims=0)  # [b, s, G]
    chosen = op.GreaterOrEqual(score, cr.kth_largest(op, score, keep))
    chosen = op.Expand(op.Unsqueeze(chosen, op.Constant(value_ints=[-1])),
                       op.Constant(value_ints=[1, 1, groups, size]))
    return op.Reshape(chosen, op.Constant(value_ints=[0, 0, experts]))


class DeepseekMoE(nn.Module):
    """Router ``gate`` (+ ``gate.e_score_correction_bias`` for V3), ``experts.{j}``,
    ``shared_experts``.

    Args:
        method: "greedy", "group_limited_greedy" (V2) or "noaux_tc" (V3).
        groups / topk_group: n_group and topk_group (group-limited methods).
        normalize: norm_topk_prob (noaux_tc only).
        bias_beside_gate: the correction bias is ``e_score_correction_bias`` of this
            module, not of ``gate`` (EXAONE-MoE's checkpoints).
    """

    def __init__(self, hidden: int, expert_size: int, experts: int, top_k: int, *, method: str,
                 groups: int, topk_group: int, scaling: float, normalize: bool,
                 shared_size: int, activation: str, shared_bias: bool = False,
                 bias_beside_gate: bool = False):
        super().__init__()
        self.experts_count, self.top_k, self.method = experts, top_k, method
        self.groups, self.topk_group = groups, topk_group
        self.scaling, self.normalize = scaling, normalize
        self.dtype = get_build_dtype()
        self.gate = Linear(hidden, experts)
        self.bias_beside_gate = bias_beside_gate
        # float32 in every build, as transformers keeps it: it decides expert choices
        if method == "noaux_tc" and bias_beside_gate:
            self.e_score_correction_bias = Weight([experts], dtype=F32)
        elif method == "noaux_tc":
            self.gate.e_score_correction_bias = Weight([experts], dtype=F32)
        self.experts = nn.ModuleList([GatedExpert(hidden, expert_size, activation)
                                      for _ in range(experts)])
        self.shared_experts = GatedMLP(hidden, shared_size, activation, shared_bias)

    def _choose(self, op, logits):
        """float32 router logits -> (scores [..., E], the bool [..., E] top-k choice)."""
        sigmoid = self.method == "noaux_tc"
        probs = op.Sigmoid(logits) if sigmoid else op.Softmax(logits, axis=-1)
        if sigmoid:
            owner = self if self.bias_beside_gate else self.gate
            choice = op.Add(probs, owner.e_score_correction_bias)
        else:
            choice = probs
        if self.topk_group < self.groups:
            keep = _group_mask(op, choice, self.groups, self.topk_group, self.experts_count,
                               2 if sigmoid else 1)
            # transformers fills the dropped groups with -inf (V3) or 0 (V2, probs > 0)
            choice = op.Where(keep, choice, cr.constant(op, float("-inf") if sigmoid else 0.0))
        return probs, op.GreaterOrEqual(choice, cr.kth_largest(op, choice, self.top_k))

    def _chosen_routed(self, op, x, logits):
        """The grouped / sigmoid routings, as renormalized softmax top-k times a per-token
        factor (the weights' sum over the choice, renormalized or not, scaled)."""
        logits32 = logits if self.dtype == F32 else op.Cast(logits, to=F32)
        scores, chosen = self._choose(op, logits32)
        log_scores = logits  # softmax scores: the logits are their log up to a constant
        if self.method == "noaux_tc":
            log_scores = op.Neg(op.Softplus(op.Neg(logits32)))  # log sigmoid, finite
            if self.dtype != F32:
                log_scores = op.Cast(log_scores, to=self.dtype)
        routing = cr.chosen_routing(op, log_scores, chosen, self.top_k, self.dtype)
        out = combine_experts(op, x, routing, list(self.experts), self.dtype)
        total = cr.chosen_sum(op, scores, chosen)  # routing is scores / total
        factor = op.Div(total, op.Add(total, cr.constant(op, 1e-20))) if self.normalize else total
        if self.scaling != 1.0:
            factor = op.Mul(factor, cr.constant(op, self.scaling))
        return cr.scale_tokens(op, out, factor, self.dtype)

    def forward(self, op, x):
        logits = self.gate(op, x)
        if self.method != "greedy":
            return op.Add(self._chosen_routed(op, x, logits), self.shared_experts(op, x))
        routing = routing_weights(op, logits, self.top_k, False, self.dtype)
        out = combine_experts(op, x, routing, list(self.experts), self.dtype)
        if self.scaling != 1.0:
            out = op.Mul(out, scalar(op, self.scaling))
        return op.Add(out, self.shared_experts(op, x))
