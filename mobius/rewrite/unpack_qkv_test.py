"""UnpackQKV: packed GQA -> three projections (lazy weight slices) or a Split; parity; gating."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.contrib.group_query_attention import spec_from_node
from mobius.ep.capabilities import FLOAT_DTYPES
from mobius.ep.registry import ep_registry, get_ep
from testing import gqa_graphs as g
from mobius.rewrite.pack_qkv import PackQKV
from mobius.rewrite.rule import RuleContext
from mobius.rewrite.unpack_qkv import UnpackQKV
from mobius.roles import DECODER, ROLES

#: this test's Bazel target, read by //tools:rewrite_rules
#: (a tiny-llama build + ~130 small ORT sessions)
TEST_TARGET = {"size": "medium"}

F32, F16 = g.F32, g.F16
DML_F16 = RuleContext(get_ep("dml"), F16, DECODER)
MLX_F32 = RuleContext(get_ep("mlx"), F32, DECODER)
F16_ATOL = 4 * 2.0**-9  # 4 float16 ulps at magnitude 2 (outputs are O(1))


def _max_diff(a, b) -> float:
    return max(float(np.abs(x.astype(np.float32) - y.astype(np.float32)).max()) for x, y in zip(a, b))


def _unpack(built: g.GqaModel, ctx=MLX_F32) -> int:
    return UnpackQKV().apply(built.model, ctx)


def _gqas(model):
    return [n for n in model.graph if n.op_type == "GroupQueryAttention"]


# ---- (a) pattern in -> pattern out ---------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rope", ["absorbed", "none"])
def test_packed_projection_becomes_three_matmuls(bias, rope):
    built = g.gqa_model(F32, packed=True, bias=bias, rope=rope, layers=2)
    assert g.op_counts(built.model)["MatMul"] == 2
    assert _unpack(built) == 2
    counts = g.op_counts(built.model)
    assert counts["MatMul"] == 6 and counts["Add"] == (6 if bias else 0)
    assert "Split" not in counts
    d = built.dims
    for gqa in _gqas(built.model):
        spec = spec_from_node(gqa)
        assert not spec.packed_qkv and spec.do_rotary == (rope == "absorbed")
        assert gqa.overload.endswith("_p0") and gqa.op_identifier() in built.model.functions
        for value, role, heads in zip(gqa.inputs[:3], "qkv", (d.heads, d.kv_heads, d.kv_heads)):
            node = value.producer()
            if bias:
                assert node.op_type == "Add"
                node = node.inputs[0].producer()
            assert node.op_type == "MatMul" and node.inputs[0].name == "x"
            assert list(node.inputs[1].shape) == [d.hidden, heads * d.head_dim]
            assert f".{role}_proj.weight" in node.inputs[1].name
    assert not any("qkv_proj" in name for name in built.model.graph.initializers)


def test_weight_slices_are_lazy_and_exact():
    built = g.gqa_model(F32, packed=True, bias=True)
    _unpack(built)
    assert sum(built.reads.values()) == 0, "no weight may be read while rewriting"
    packed_w = built.arrays["layers.0.attn.qkv_proj.weight"]
    packed_b = built.arrays["layers.0.attn.qkv_proj.bias"]
    d = built.dims
    bounds = np.cumsum([0, d.heads * d.head_dim, d.kv_heads * d.head_dim, d.kv_heads * d.head_dim])
    inits = built.model.graph.initializers
    for role, start, stop in zip("qkv", bounds[:-1], bounds[1:]):
        weight = inits[f"layers.0.attn.{role}_proj.weight"].const_value
        bias = inits[f"layers.0.attn.{role}_proj.bias"].const_value
        assert isinstance(weight, ir.LazyTensor) and isinstance(bias, ir.LazyTensor)
        np.testing.assert_array_equal(weight.numpy(), packed_w[:, start:stop])
        np.testing.assert_array_equal(bias.numpy(), packed_b[start:stop])


def test_pack_then_unpack_restores_the_original_weights():
    built = g.gqa_model(F32, bias=True)
    original = dict(built.arrays)
    PackQKV().apply(built.model, RuleContext(get_ep("cpu"), F32, DECODER))
    _unpack(built)
    assert sum(built.reads.values()) == 0
    for role in "qkv":
        for kind in ("weight", "bias"):
            name = f"layers.0.attn.{role}_proj.{kind}"
            np.testing.assert_array_equal(
                built.model.graph.initializers[name].const_value.numpy(), original[name])


def test_packed_input_from_another_op_is_split():
    # the packed tensor is a graph input (no MatMul to slice): a Split is inserted
    built = g.gqa_model(F32, packed=True)
    graph = built.model.graph
    gqa = built.gqa
    packed = ir.Value(name="qkv_in", type=ir.TensorType(F32), shape=ir.Shape(["batch", "seq", 64]))
    graph.inputs.append(packed)
    gqa.replace_input_with(0, packed)
    assert _unpack(built) == 1
    counts = g.op_counts(built.model)
    assert counts["Split"] == 1 and counts["MatMul"] == 0
    split = gqa.inputs[0].producer()
    assert split.op_type == "Split" and split.inputs[0] is packed
    assert [gqa.inputs[i] for i in range(3)] == list(split.outputs)
    np.testing.assert_array_equal(split.inputs[1].const_value.numpy(), [64, 32, 32])


def test_shared_packed_projection_is_split_not_sliced():
    built = g.gqa_model(F32, packed=True)
    graph = built.model.graph
    packed = built.gqa.inputs[0]
    extra = ir.Node("", "Relu", [packed])
    graph.append(extra)
    extra.outputs[0].name, extra.outputs[0].type = "qkv_relu", packed.type
    graph.outputs.append(extra.outputs[0])
    assert _unpack(built) == 1
    counts = g.op_counts(built.model)
    assert counts["Split"] == 1 and counts["MatMul"] == 1


# ---- (b) near misses ------------------------------------------------------------------------------


@pytest.mark.parametrize("rope", ["absorbed", "outside", "none"])
def test_unpacked_gqa_is_left_alone(rope):
    built = g.gqa_model(F32, rope=rope)
    before = g.op_counts(built.model)
    assert _unpack(built) == 0
    assert g.op_counts(built.model) == before


# ---- (c) onnxruntime parity -----------------------------------------------------------------------


@pytest.mark.parametrize("dims", [g.Dims(), g.Dims(seq=1, past=4)], ids=["prefill", "decode"])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("rope", ["absorbed", "none"])
@pytest.mark.parametrize("dtype, ctx, atol", [(F32, MLX_F32, 1e-5), (F16, DML_F16, F16_ATOL)],
                         ids=["f32", "f16"])
def test_unpacked_graph_matches_packed_on_ort_cpu(dims, bias, rope, dtype, ctx, atol):
    built = g.gqa_model(dtype, dims=dims, packed=True, bias=bias, rope=rope, layers=2)
    feeds = built.feeds()
    expected = g.run(built.model, feeds)
    assert _unpack(built, ctx) == 2
    assert _max_diff(expected, g.run(built.model, feeds)) <= atol


@pytest.mark.parametrize("dtype, atol", [(F32, 1e-5), (F16, F16_ATOL)], ids=["f32", "f16"])
def test_split_fallback_matches_on_ort_cpu(dtype, atol):
    built = g.gqa_model(dtype, packed=True, bias=True)
    graph = built.model.graph
    extra = ir.Node("", "Relu", [built.gqa.inputs[0]])
    graph.append(extra)
    extra.outputs[0].name, extra.outputs[0].type = "qkv_relu", built.gqa.inputs[0].type
    graph.outputs.append(extra.outputs[0])
    feeds = built.feeds()
    expected = g.run(built.model, feeds)
    assert _unpack(built, RuleContext(get_ep("mlx"), dtype, DECODER)) == 1
    assert g.op_counts(built.model)["Split"] == 1
    assert _max_diff(expected, g.run(built.model, feeds)) <= atol


# ---- (d) gating -------------------------------------------------------------------------------------


@pytest.mark.parametrize("ep", ep_registry.names())
@pytest.mark.parametrize("dtype", sorted(FLOAT_DTYPES, key=lambda d: d.name))
@pytest.mark.parametrize("role", ROLES)
def test_applies_exactly_where_the_ep_does_not_pack_for_the_dtype(ep, dtype, role):
    caps = get_ep(ep)
    expected = role == DECODER and dtype not in caps.qkv_pack_dtypes
    assert UnpackQKV().applies(RuleContext(caps, dtype, role)) is expected


@pytest.mark.parametrize("ep, dtype, unpacks", [
    ("dml", F16, True), ("mlx", F16, True), ("mlx", F32, True), ("cpu", F32, False),
    ("cpu", F16, True), ("cuda", F16, False), ("webgpu", F32, False),
])
def test_gating_per_ep(ep, dtype, unpacks):
    assert UnpackQKV().applies(RuleContext(get_ep(ep), dtype, DECODER)) is unpacks


def test_packed_graph_retargeted_to_mlx_is_unpacked(tmp_path):
    """A packed webgpu/f32 tiny-llama re-optimized for mlx: three projections, RoPE still fused."""
    import mobius
    from mobius.optimize.pipeline import optimize_model

    checkpoint = g.tiny_checkpoint(tmp_path / "ckpt")
    pkg = mobius.build(checkpoint, execution_provider="webgpu", dtype="f32")
    layers = pkg.config.num_hidden_layers
    report = optimize_model(pkg.model, "mlx", F32, "decoder")
    assert report.matched("UnpackQKV") == layers
    assert report.matched("SeparateRoPE") == 0
    for gqa in _gqas(pkg.model):
        assert all(v is not None for v in gqa.inputs[:3])
        assert gqa.attributes["do_rotary"].value == 1
    counts = g.op_counts(pkg.model)
    assert counts["MatMul"] == 7 * layers
    assert counts["Gemm"] == 1  # the lm_head
