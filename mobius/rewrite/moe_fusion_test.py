"""MoEFusion: the decomposed routing of mobius.components.moe -> com.microsoft MoE.

Graph in (a SparseMoE component graph with real weights) -> one MoE node with
interleaved/stacked weights; the fused graph runs on onnxruntime's CPU MoE
kernel with the generic graph's outputs; inlining its function body (for an
EP without the kernel) restores the decomposed routing with the same
outputs; near-misses stay unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnxscript import nn

from mobius.components.moe import MIXTRAL_EXPERT_NAMES, SparseMoE, combine_experts, routing_weights
from mobius.components.mlp import GatedMLP
from mobius.components.linear import Linear
from mobius.context import build_context
from mobius.contrib.moe import MoeSpec
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.optimize.histogram import op_histogram
from mobius.rewrite.inline_functions import InlineUnsupportedFunctions
from mobius.rewrite.moe_fusion import MoEFusion
from mobius.rewrite.rule import RuleContext
from mobius.roles import DECODER
from mobius.weights.dtypes import numpy_dtype
from testing.onnx_graphs import attach_arrays, component_model, run_model

#: this test's Bazel target, read by //tools:rewrite_rules (~60 small ORT sessions)
TEST_TARGET = {"size": "medium"}

HIDDEN, INTER = 24, 40
MOE = "com.microsoft::MoE"
DECOMPOSED = ("NonZero", "ScatterND", "TopK", "GatherND")


def _ctx(ep: str, dtype=ir.DataType.FLOAT) -> RuleContext:
    return RuleContext(get_ep(ep), dtype, DECODER)


def _weights(num_experts, names=("gate_proj", "up_proj", "down_proj"), seed=0, shared=None):
    rng = np.random.default_rng(seed)
    gate, up, down = names
    arrays = {"gate.weight": rng.standard_normal((num_experts, HIDDEN)).astype(np.float32)}
    for e in range(num_experts):
        arrays[f"experts.{e}.{gate}.weight"] = 0.3 * rng.standard_normal((INTER, HIDDEN))
        arrays[f"experts.{e}.{up}.weight"] = 0.3 * rng.standard_normal((INTER, HIDDEN))
        arrays[f"experts.{e}.{down}.weight"] = 0.3 * rng.standard_normal((HIDDEN, INTER))
    if shared:
        arrays["shared_expert.gate_proj.weight"] = 0.3 * rng.standard_normal((shared, HIDDEN))
        arrays["shared_expert.up_proj.weight"] = 0.3 * rng.standard_normal((shared, HIDDEN))
        arrays["shared_expert.down_proj.weight"] = 0.3 * rng.standard_normal((HIDDEN, shared))
        arrays["shared_expert_gate.weight"] = rng.standard_normal((1, HIDDEN))
    return {k: np.asarray(v, np.float32) for k, v in arrays.items()}


def _moe_model(tmp_path, num_experts=4, top_k=2, normalize=True, *, dtype=ir.DataType.FLOAT,
               activation="silu", names=("gate_proj", "up_proj", "down_proj"), shared=None,
               shape=("batch", "seq", HIDDEN)):
    with build_context(None, dtype):
        moe = SparseMoE(HIDDEN, INTER, num_experts, top_k, normalize_top_k=normalize,
                        activation=activation, expert_names=names, shared_expert_size=shared)
        attach_arrays(moe, _weights(num_experts, names, shared=shared), tmp_path)
        return component_model([("x", dtype, list(shape))], lambda op, x: moe(op, x),
                               [("y", list(shape))])


def _x(shape=(3, 5, HIDDEN), dtype=ir.DataType.FLOAT, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(numpy_dtype(dtype))


def _histogram(model) -> dict:
    return dict(op_histogram(model))


CASES = {
    # name: (experts, top_k, normalize, names)
    "mixtral_e4_k2": (4, 2, True, MIXTRAL_EXPERT_NAMES),
    "qwen_e6_k2_unnormalized": (6, 2, False, ("gate_proj", "up_proj", "down_proj")),
    "qwen_e5_k3_normalized": (5, 3, True, ("gate_proj", "up_proj", "down_proj")),
    "e3_k1": (3, 1, False, ("gate_proj", "up_proj", "down_proj")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fuses_runs_and_inlines_back(tmp_path, case):
    experts, top_k, normalize, names = CASES[case]
    x = _x()
    generic = _moe_model(tmp_path / "a", experts, top_k, normalize, names=names)
    (expected,) = run_model(generic, {"x": x})

    fused = _moe_model(tmp_path / "b", experts, top_k, normalize, names=names)
    assert MoEFusion().applies(_ctx("cuda"))
    assert MoEFusion().apply(fused, _ctx("cuda")) == 1
    hist = _histogram(fused)
    assert hist.get(MOE) == 1
    # without renormalization: the renormalizing op times the top-k mass (one TopK)
    assert hist.get("TopK", 0) == (0 if normalize else 1), hist
    assert hist.get("ReduceSum", 0) == (0 if normalize else 1), hist
    assert not any(hist.get(op) for op in DECOMPOSED if op != "TopK"), hist
    assert not any(name.startswith("experts.") and name.endswith(".weight")
                   for name in fused.graph.initializers), "per-expert weights should be gone"
    (node,) = [n for n in fused.graph if n.op_type == "MoE"]
    attrs = {k: v.value for k, v in node.attributes.items()}
    assert attrs["k"] == top_k and attrs["normalize_routing_weights"] == 1
    assert attrs["activation_type"] == "swiglu" and attrs["swiglu_fusion"] == 1
    assert node.overload == MoeSpec(experts, HIDDEN, INTER, top_k, True,
                                    ir.DataType.FLOAT).overload
    (got,) = run_model(fused, {"x": x})  # onnxruntime's CPU MoE kernel
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    # An EP without the kernel: the inline stage expands the function body.
    assert InlineUnsupportedFunctions().apply(fused, _ctx("dml")) == 1
    hist = _histogram(fused)
    assert not hist.get(MOE) and hist.get("NonZero") == experts and hist.get("ScatterND") == experts
    assert not fused.functions
    (inlined,) = run_model(fused, {"x": x})
    np.testing.assert_allclose(inlined, expected, rtol=1e-6, atol=1e-6)


def test_stacked_weights_are_interleaved_gate_up_and_down(tmp_path):
    fused = _moe_model(tmp_path, 3, 2, True, names=MIXTRAL_EXPERT_NAMES)
    MoEFusion().apply(fused, _ctx("cuda"))
    arrays = _weights(3, MIXTRAL_EXPERT_NAMES)
    (node,) = [n for n in fused.graph if n.op_type == "MoE"]
    fc1 = node.inputs[2].const_value.numpy()
    fc2 = node.inputs[4].const_value.numpy()
    assert node.inputs[3] is None and len(node.inputs) == 5
    assert fc1.shape == (3, 2 * INTER, HIDDEN) and fc2.shape == (3, HIDDEN, INTER)
    for e in range(3):
        np.testing.assert_array_equal(fc1[e, 0::2], arrays[f"experts.{e}.w1.weight"])
        np.testing.assert_array_equal(fc1[e, 1::2], arrays[f"experts.{e}.w3.weight"])
        np.testing.assert_array_equal(fc2[e], arrays[f"experts.{e}.w2.weight"])
    assert node.inputs[2].name == "experts.fc1_interleaved"
    # the router logits reach the op as [tokens, E]
    assert node.inputs[1].producer().op_type == "Reshape"


def test_decode_shape_and_two_dimensional_tokens(tmp_path):
    """One token (most experts idle) and a 2-D [tokens, hidden] input."""
    for i, shape in enumerate([("batch", "seq", HIDDEN), ("tokens", HIDDEN)]):
        x = _x((1, 1, HIDDEN) if len(shape) == 3 else (7, HIDDEN), seed=5)
        generic = _moe_model(tmp_path / f"g{i}", 8, 2, True, shape=shape)
        fused = _moe_model(tmp_path / f"f{i}", 8, 2, True, shape=shape)
        assert MoEFusion().apply(fused, _ctx("cuda")) == 1
        (expected,) = run_model(generic, {"x": x})
        (got,) = run_model(fused, {"x": x})
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_shared_expert_stays_beside_the_fused_op(tmp_path):
    x = _x()
    generic = _moe_model(tmp_path / "a", 4, 2, False, shared=28)
    fused = _moe_model(tmp_path / "b", 4, 2, False, shared=28)
    assert MoEFusion().apply(fused, _ctx("cuda")) == 1
    hist = _histogram(fused)
    assert hist[MOE] == 1 and hist["Sigmoid"] == 2  # shared expert's SiLU + its gate
    (expected,) = run_model(generic, {"x": x})
    (got,) = run_model(fused, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_float16(tmp_path):
    """f16: routing in float32 around the Casts; the fused op takes f16 logits."""
    f16 = ir.DataType.FLOAT16
    x = _x(dtype=f16)
    generic = _moe_model(tmp_path / "a", 4, 2, True, dtype=f16)
    fused = _moe_model(tmp_path / "b", 4, 2, True, dtype=f16)
    assert MoEFusion().apply(fused, _ctx("cuda", f16)) == 1
    assert not _histogram(fused).get("Cast"), "the pattern's Casts should be gone"
    (expected,) = run_model(generic, {"x": x})
    (got,) = run_model(fused, {"x": x})
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32),
                               rtol=1e-2, atol=1e-2)
    InlineUnsupportedFunctions().apply(fused, _ctx("dml", f16))
    (inlined,) = run_model(fused, {"x": x})
    # f16 rounding only (one [H, 2I] gate/up MatMul instead of two [H, I] ones).
    np.testing.assert_allclose(inlined.astype(np.float32), expected.astype(np.float32),
                               rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------------------
# Legality and near-misses: nothing changes


@pytest.mark.parametrize("ep", ["default", "dml", "webgpu", "mlx", "trt-rtx", "onnx-standard"])
def test_not_applied_where_the_ep_has_no_kernel(ep):
    assert not MoEFusion().applies(_ctx(ep))


def test_applied_only_for_the_dtypes_the_kernel_takes():
    """onnxruntime's CPU MoE kernel takes float32 only; CUDA's every float type."""
    f16, bf16 = ir.DataType.FLOAT16, ir.DataType.BFLOAT16
    assert MoEFusion().applies(_ctx("cpu"))
    assert not MoEFusion().applies(_ctx("cpu", f16)) and not MoEFusion().applies(_ctx("cpu", bf16))
    assert MoEFusion().applies(_ctx("cuda", f16)) and MoEFusion().applies(_ctx("cuda", bf16))


def test_moe_dtypes_need_the_kernel():
    caps = get_ep("cuda")
    with pytest.raises(ValueError, match="MoE is not in contrib_ops"):
        EpCapabilities(name="x", moe_dtypes={ir.DataType.FLOAT},
                       contrib_ops=caps.contrib_ops - {"MoE"})


def _unchanged(model, x):
    before = _histogram(model)
    (expected,) = run_model(model, {"x": x})
    assert MoEFusion().apply(model, _ctx("cuda")) == 0
    assert _histogram(model) == before
    (got,) = run_model(model, {"x": x})
    np.testing.assert_array_equal(got, expected)


def test_gelu_gated_experts_are_not_fused(tmp_path):
    _unchanged(_moe_model(tmp_path, 4, 2, True, activation="gelu"), _x())


class _Recombined(nn.Module):
    """The component's pieces recombined: routing_fn(op, logits) and the first experts_used experts."""

    def __init__(self, routing_fn, experts_used: int, num_experts: int):
        super().__init__()
        self.routing_fn = routing_fn
        self.experts_used = experts_used
        self.gate = Linear(HIDDEN, num_experts)
        self.experts = nn.ModuleList([GatedMLP(HIDDEN, INTER) for _ in range(num_experts)])

    def forward(self, op, x):
        routing = self.routing_fn(op, self.gate(op, x))
        experts = list(self.experts)[: self.experts_used]
        return combine_experts(op, x, routing, experts, ir.DataType.FLOAT)


def _custom_model(tmp_path, routing_fn, experts_used: int, num_experts: int = 4):
    with build_context(None, ir.DataType.FLOAT):
        module = _Recombined(routing_fn, experts_used, num_experts)
    arrays = _weights(num_experts)
    used = {n for n, _ in module.named_parameters()}
    attach_arrays(module, {k: v for k, v in arrays.items() if k in used}, tmp_path)
    return component_model([("x", ir.DataType.FLOAT, ["batch", "seq", HIDDEN])],
                           lambda op, x: module(op, x), [("y", ["batch", "seq", HIDDEN])])


def test_component_pieces_recombined_still_fuse(tmp_path):
    """Guards the near-misses below: the same construction with nothing changed fuses."""
    model = _custom_model(tmp_path, lambda op, lg: routing_weights(op, lg, 2, True,
                                                                    ir.DataType.FLOAT), 4)
    assert MoEFusion().apply(model, _ctx("cuda")) == 1


def test_missing_expert_is_not_fused(tmp_path):
    """Routing over 4 experts but only 3 combined: not an MoE the op can express."""
    model = _custom_model(tmp_path, lambda op, lg: routing_weights(op, lg, 2, True,
                                                                    ir.DataType.FLOAT), 3)
    _unchanged(model, _x())


def test_dense_softmax_routing_is_not_fused(tmp_path):
    """Every expert weighted by its softmax probability (no top-k): not the op's routing."""
    model = _custom_model(tmp_path, lambda op, lg: op.Softmax(lg, axis=-1), 4)
    _unchanged(model, _x())


def test_sigmoid_routing_is_not_fused(tmp_path):
    """Top-k over sigmoid scores (DeepSeek-V3 style) differs from the op's softmax."""
    def routing(op, logits):
        scores = op.Sigmoid(logits)
        top, _ = op.TopK(scores, op.Constant(value_ints=[2]), axis=-1, _outputs=2)
        kth = op.ReduceMin(top, op.Constant(value_ints=[-1]), keepdims=1)
        zero = op.Constant(value=ir.tensor(np.array(0, np.float32)))
        return op.Where(op.GreaterOrEqual(scores, kth), scores, zero)

    _unchanged(_custom_model(tmp_path, routing, 4), _x())


# ---------------------------------------------------------------------------
# gpt-oss: stacked experts with biases and the clamped SwiGLU


def _gpt_oss_model(tmp_path, limit: float, alpha: float = 1.702, experts: int = 4, top_k: int = 2):
    from mobius.config.architecture import ArchitectureConfig
    from mobius.models import gpt_oss

    raw = {"model_type": "gpt_oss", "vocab_size": 293, "hidden_size": HIDDEN,
           "intermediate_size": INTER, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 1, "head_dim": 12, "num_local_experts": experts,
           "num_experts_per_tok": top_k, "swiglu_limit": limit, "swiglu_alpha": alpha}
    config = gpt_oss.FAMILY.make_config(raw)
    rng = np.random.default_rng(3)
    arrays = {"router.weight": rng.standard_normal((experts, HIDDEN)),
              "router.bias": rng.standard_normal(experts),
              "experts.gate_up_proj": 0.4 * rng.standard_normal((experts, HIDDEN, 2 * INTER)),
              "experts.gate_up_proj_bias": rng.standard_normal((experts, 2 * INTER)),
              "experts.down_proj": 0.3 * rng.standard_normal((experts, INTER, HIDDEN)),
              "experts.down_proj_bias": rng.standard_normal((experts, HIDDEN))}
    with build_context(None, ir.DataType.FLOAT):
        moe = gpt_oss.GptOssMoE(config, config.options)
        attach_arrays(moe, {k: np.asarray(v, np.float32) for k, v in arrays.items()}, tmp_path)
        shape = ["batch", "seq", HIDDEN]
        return component_model([("x", ir.DataType.FLOAT, shape)], lambda op, x: moe(op, x),
                               [("y", shape)])


@pytest.mark.parametrize("limit", [0.5, 7.0])
def test_gpt_oss_experts_fuse_with_biases_and_clamped_swiglu(tmp_path, limit):
    """The CPU MoE kernel computes gpt-oss's experts exactly (clamping active at 0.5)."""
    x = 2 * _x()
    (expected,) = run_model(_gpt_oss_model(tmp_path / "a", limit), {"x": x})
    fused = _gpt_oss_model(tmp_path / "b", limit)
    assert MoEFusion().apply(fused, _ctx("cuda")) == 1
    (node,) = [n for n in fused.graph if n.op_type == "MoE"]
    attrs = {k: v.value for k, v in node.attributes.items()}
    assert attrs["activation_alpha"] == pytest.approx(1.702) and attrs["activation_beta"] == 1.0
    assert attrs["swiglu_limit"] == limit and attrs["normalize_routing_weights"] == 1
    assert [v is not None for v in node.inputs] == [True] * 6  # both expert biases
    assert tuple(node.inputs[2].shape) == (4, 2 * INTER, HIDDEN)
    (got,) = run_model(fused, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert InlineUnsupportedFunctions().apply(fused, _ctx("dml")) == 1
    (inlined,) = run_model(fused, {"x": x})
    np.testing.assert_allclose(inlined, expected, rtol=1e-6, atol=1e-6)
    if limit < 1:  # the clamp is exercised: without it the kernel's output differs
        unclamped = _gpt_oss_model(tmp_path / "c", 1e6)
        (loose,) = run_model(unclamped, {"x": x})
        assert np.abs(loose - expected).max() > 1e-2
