"""ShapeElimination: every Shape op -> constants + dims counted from data."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnxscript._internal.builder import GraphBuilder

from mobius.components.attention_mask import causal_padding_mask
from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.rule import RuleContext
from mobius.rewrite.shape_elimination import ShapeElimination

F, I64 = TensorProto.FLOAT, TensorProto.INT64
#: capability data alone turns the rule on (no EP name involved)
NO_SHAPE = EpCapabilities(name="test-no-shape", supports_shape=False)


def _ctx(caps) -> RuleContext:
    return RuleContext(get_ep(caps) if isinstance(caps, str) else caps, ir.DataType.FLOAT, "decoder")


def _model(nodes, inputs, outputs, initializers=(), check=True) -> ir.Model:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    if check:
        onnx.checker.check_model(proto, full_check=True)
    return ir.serde.deserialize_model(proto)


def _run(model: ir.Model, feeds):
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _count(model: ir.Model, op_type: str) -> int:
    graphs = [model.graph, *(f.graph for f in model.functions.values())]
    return sum(n.op_type == op_type for g in graphs for n in g.all_nodes())


def _shapes_model() -> ir.Model:
    """Shape in every flavour: full, start/end, negative, static-only, float source."""
    out = lambda name, n: helper.make_tensor_value_info(name, I64, [n])  # noqa: E731
    return _model(
        [helper.make_node("Shape", ["ids"], ["full"]),
         helper.make_node("Shape", ["ids"], ["tail"], start=1),
         helper.make_node("Shape", ["w"], ["static"], start=1),
         helper.make_node("Shape", ["w"], ["neg"], start=-2, end=-1),
         helper.make_node("Shape", ["w"], ["clamped"], start=-10, end=1),
         helper.make_node("Shape", ["w"], ["empty"], start=2, end=1),
         helper.make_node("Neg", ["f"], ["f_neg"]),
         helper.make_node("Shape", ["f_neg"], ["from_float"]),
         helper.make_node("Shape", ["w"], ["w_all"])],
        [helper.make_tensor_value_info("ids", I64, ["batch", "seq"]),
         helper.make_tensor_value_info("w", F, ["batch", 4, 8]),
         helper.make_tensor_value_info("f", F, ["n"])],
        [out("full", 2), out("tail", 1), out("static", 2), out("neg", 1), out("clamped", 1),
         out("empty", 0), out("from_float", 1), out("w_all", 3)])


def _shapes_feeds(batch, seq, n):
    f = np.full((n,), np.nan, dtype=np.float32)  # NaN: x == x would count 0 here
    f[::2] = -np.inf
    return {"ids": np.zeros((batch, seq), np.int64), "w": np.ones((batch, 4, 8), np.float32), "f": f}


def test_every_shape_is_removed_and_values_match():
    model = _shapes_model()
    feeds = [_shapes_feeds(2, 5, 3), _shapes_feeds(1, 1, 1), _shapes_feeds(3, 7, 0)]
    expected = [_run(model, f) for f in feeds]
    assert ShapeElimination().apply(model, _ctx("webgpu")) == 8
    assert _count(model, "Shape") == 0
    for f, want in zip(feeds, expected):
        for got, ref in zip(_run(model, f), want):
            np.testing.assert_array_equal(got, ref)
            assert got.dtype == np.int64


def test_static_dims_fold_to_constants():
    model = _shapes_model()
    ShapeElimination().apply(model, _ctx("webgpu"))
    by_name = {v.name: v for v in model.graph.outputs}
    for name, want in (("static", [4, 8]), ("neg", [4]), ("empty", [])):
        value = by_name[name]
        assert value.const_value is not None, name
        assert value.const_value.numpy().tolist() == want
    # a dynamic dim never reads the whole tensor: its other axes are sliced to 1 first
    assert _count(model, "Slice") >= 1


def test_named_dims_come_from_safe_graph_inputs():
    """batch_size of a KV cache is never counted through it: past_sequence_length may be 0."""
    model = _model(
        [helper.make_node("Shape", ["past"], ["past_shape"]),
         helper.make_node("Shape", ["attention_mask"], ["mask_shape"])],
        [helper.make_tensor_value_info("past", F, ["batch_size", 2, "past_sequence_length", 4]),
         helper.make_tensor_value_info("attention_mask", I64, ["batch_size", "total_sequence_length"])],
        [helper.make_tensor_value_info("past_shape", I64, [4]),
         helper.make_tensor_value_info("mask_shape", I64, [2])])
    ShapeElimination().apply(model, _ctx("webgpu"))
    assert _count(model, "Shape") == 0
    slices = [n for n in model.graph if n.op_type == "Slice"]
    # batch_size and total_sequence_length from the mask, past_sequence_length from past
    assert sorted(n.inputs[0].name for n in slices) == ["attention_mask", "attention_mask", "past"]
    for batch, past_len, total in ((2, 0, 5), (1, 3, 4)):
        past_shape, mask_shape = _run(model, {
            "past": np.zeros((batch, 2, past_len, 4), np.float32),
            "attention_mask": np.ones((batch, total), np.int64)})
        assert past_shape.tolist() == [batch, 2, past_len, 4]
        assert mask_shape.tolist() == [batch, total]


def _mask_model(sliding_window=None) -> ir.Model:
    graph = ir.Graph([], [], nodes=[], opset_imports={"": 23}, name="mask")
    builder = GraphBuilder(graph)
    ids = builder.input("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"])
    mask = builder.input("attention_mask", ir.DataType.INT64, ["batch_size", "total_sequence_length"])
    out = causal_padding_mask(builder.op, ids, mask, ir.DataType.FLOAT, sliding_window)
    builder.add_output(out, "bias")
    return ir.Model(graph, ir_version=10)


@pytest.mark.parametrize("window", [None, 3])
def test_generic_attention_mask_subgraph(window):
    """components/attention_mask.py: Shape + Range -> no Shape, same mask (prefill + decode)."""
    model = _mask_model(window)
    assert _count(model, "Shape") == 2
    cases = []
    for batch, seq, total, pad in ((2, 6, 6, 2), (2, 1, 7, 2), (1, 3, 9, 0)):
        mask = np.ones((batch, total), np.int64)
        mask[-1, :pad] = 0
        cases.append({"input_ids": np.zeros((batch, seq), np.int64), "attention_mask": mask})
    expected = [_run(model, f)[0] for f in cases]
    assert ShapeElimination().apply(model, _ctx(NO_SHAPE)) == 2
    assert _count(model, "Shape") == 0
    for f, want in zip(cases, expected):
        np.testing.assert_array_equal(_run(model, f)[0], want)


def test_shape_in_function_body_and_subgraph():
    """Function bodies and If branches are lowered too (Constants, no initializers there)."""
    then_g = helper.make_graph([helper.make_node("Shape", ["x"], ["t"], start=1)], "then", [],
                               [helper.make_tensor_value_info("t", I64, [1])])
    else_g = helper.make_graph([helper.make_node("Shape", ["x"], ["e"], start=0, end=1)], "else", [],
                               [helper.make_tensor_value_info("e", I64, [1])])
    fn = helper.make_function("custom", "Dims", ["a"], ["d"],
                              [helper.make_node("Shape", ["a"], ["d"])],
                              [helper.make_opsetid("", 23)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Dims", ["x"], ["z"], domain="custom")],
        "g",
        [helper.make_tensor_value_info("x", F, ["a", "b"]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", I64, [1]), helper.make_tensor_value_info("z", I64, [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23),
                                                    helper.make_opsetid("custom", 1)],
                              ir_version=10, functions=[fn])
    model = ir.serde.deserialize_model(proto)
    feeds = [{"x": np.zeros((2, 5), np.float32), "c": np.array(c)} for c in (True, False)]
    expected = [_run(model, f) for f in feeds]
    # function parameters carry no shapes: that Shape must stay, and is reported
    with pytest.warns(UserWarning, match="rank of 'a' is unknown"):
        assert ShapeElimination().apply(model, _ctx("webgpu")) == 2
    assert _count(model, "Shape") == 1
    branches = [a.value for n in model.graph if n.op_type == "If" for a in n.attributes.values()]
    assert all(not b.initializers for b in branches)
    for f, want in zip(feeds, expected):
        for got, ref in zip(_run(model, f), want):
            np.testing.assert_array_equal(got, ref)


def test_near_miss_unknown_rank_stays_with_warning():
    model = _model([helper.make_node("Shape", ["x"], ["s"])],
                   [helper.make_tensor_value_info("x", F, None)],
                   [helper.make_tensor_value_info("s", I64, [None])], check=False)
    with pytest.warns(UserWarning, match="cannot lower Shape"):
        assert ShapeElimination().apply(model, _ctx("webgpu")) == 0
    assert _count(model, "Shape") == 1


@pytest.mark.parametrize("ep", ["default", "cpu", "cuda", "dml", "mlx"])
def test_gating_noop_where_shape_is_supported(ep):
    assert not ShapeElimination().applies(_ctx(ep))
    model = _mask_model()
    optimize_model(model, ep, "f32", model_role="encoder")
    assert _count(model, "Shape") == 2


def test_gating_from_capability_data_in_pipeline():
    assert ShapeElimination().applies(_ctx("webgpu")) and ShapeElimination().applies(_ctx(NO_SHAPE))
    model = _mask_model()
    report = optimize_model(model, NO_SHAPE, "f32", model_role="encoder")
    assert report.matched("ShapeElimination") == 2
    assert _count(model, "Shape") == 0
