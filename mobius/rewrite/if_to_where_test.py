"""IfToWhere: If with Where-compatible branches -> both branches inline + Where."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from mobius.ep.registry import get_ep
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.if_to_where import IfToWhere, why_not_lowerable
from mobius.rewrite.rule import RuleContext

F = TensorProto.FLOAT


def _ctx(ep: str) -> RuleContext:
    return RuleContext(get_ep(ep), ir.DataType.FLOAT, "decoder")


def _model(nodes, inputs, outputs, initializers=(), check=True) -> ir.Model:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    if check:  # (an If whose branches differ in shape has no static output shape to declare)
        onnx.checker.check_model(proto, full_check=True)
    return ir.serde.deserialize_model(proto)


def _branch(name, nodes, outputs, initializers=()):
    return helper.make_graph(nodes, name, [], outputs, initializer=list(initializers))


def _two_output_if(cond_shape=()) -> ir.Model:
    """y, z = If(c) then {x + 1, x * k_then} else {x * 2, x - k_else}; k_* branch initializers."""
    then_g = _branch("then", [
        helper.make_node("Constant", [], ["one"], value=helper.make_tensor("v", F, [], [1.0])),
        helper.make_node("Add", ["x", "one"], ["t_y"]),
        helper.make_node("Mul", ["x", "k_then"], ["t_z"]),
    ], [helper.make_tensor_value_info("t_y", F, ["batch", 3]),
        helper.make_tensor_value_info("t_z", F, ["batch", 3])],
        [helper.make_tensor("k_then", F, [3], [1.0, 2.0, 3.0])])
    else_g = _branch("else", [
        helper.make_node("Constant", [], ["two"], value=helper.make_tensor("v", F, [], [2.0])),
        helper.make_node("Mul", ["x", "two"], ["e_y"]),
        helper.make_node("Sub", ["x", "k_else"], ["e_z"]),
    ], [helper.make_tensor_value_info("e_y", F, ["batch", 3]),
        helper.make_tensor_value_info("e_z", F, ["batch", 3])],
        [helper.make_tensor("k_else", F, [3], [5.0, 6.0, 7.0])])
    return _model(
        [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
         helper.make_node("Greater", ["s", "zero"], ["c0"]),
         helper.make_node("Reshape", ["c0", "cshape"], ["c"]),
         helper.make_node("If", ["c"], ["y", "z"], name="choose", then_branch=then_g,
                          else_branch=else_g)],
        [helper.make_tensor_value_info("x", F, ["batch", 3])],
        [helper.make_tensor_value_info("y", F, ["batch", 3]),
         helper.make_tensor_value_info("z", F, ["batch", 3])],
        [helper.make_tensor("zero", F, [], [0.0]),
         helper.make_tensor("cshape", TensorProto.INT64, [len(cond_shape)], list(cond_shape))],
    )


def _run(model: ir.Model, feeds):
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto, full_check=True)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _ops(model: ir.Model) -> list[str]:
    return [n.op_type for n in model.graph.all_nodes()]


X_POS = np.arange(6, dtype=np.float32).reshape(2, 3)
X_NEG = -X_POS - 1


@pytest.mark.parametrize("cond_shape", [(), (1,)])
def test_if_becomes_where_with_same_outputs(cond_shape):
    model = _two_output_if(cond_shape)
    expected = [_run(model, {"x": x}) for x in (X_POS, X_NEG)]
    assert IfToWhere().apply(model, _ctx("webgpu")) == 1
    ops = _ops(model)
    assert "If" not in ops
    assert ops.count("Where") == 2
    assert [o.name for o in model.graph.outputs] == ["y", "z"]
    for x, want in zip((X_POS, X_NEG), expected):
        got = _run(model, {"x": x})
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    # sanity: the two conditions really took different branches
    assert not np.array_equal(expected[0][0], X_POS * 2)


def test_nested_if_is_lowered_innermost_first():
    inner = helper.make_node(
        "If", ["c"], ["inner_y"],
        then_branch=_branch("it", [helper.make_node("Neg", ["x"], ["it_y"])],
                            [helper.make_tensor_value_info("it_y", F, [2, 3])]),
        else_branch=_branch("ie", [helper.make_node("Abs", ["x"], ["ie_y"])],
                            [helper.make_tensor_value_info("ie_y", F, [2, 3])]))
    outer_then = _branch("ot", [inner, helper.make_node("Identity", ["inner_y"], ["ot_y"])],
                         [helper.make_tensor_value_info("ot_y", F, [2, 3])])
    outer_else = _branch("oe", [helper.make_node("Exp", ["x"], ["oe_y"])],
                         [helper.make_tensor_value_info("oe_y", F, [2, 3])])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=outer_then, else_branch=outer_else)],
                   [helper.make_tensor_value_info("x", F, [2, 3]),
                    helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                   [helper.make_tensor_value_info("y", F, [2, 3])])
    feeds = [{"x": X_NEG, "c": np.array(c)} for c in (True, False)]
    expected = [_run(model, f) for f in feeds]
    assert IfToWhere().apply(model, _ctx("dml")) == 2
    assert "If" not in _ops(model)
    for f, want in zip(feeds, expected):
        np.testing.assert_array_equal(_run(model, f)[0], want[0])


def _if_model(then_nodes, then_out, else_nodes, else_out, out_shape=None) -> ir.Model:
    return _model(
        [helper.make_node("If", ["c"], ["y"], name="guarded",
                          then_branch=_branch("t", then_nodes, [then_out]),
                          else_branch=_branch("e", else_nodes, [else_out]))],
        [helper.make_tensor_value_info("x", F, [2, 3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", F, out_shape)], check=out_shape is not None)


def test_near_miss_different_branch_shapes_stays_with_warning():
    model = _if_model([helper.make_node("Identity", ["x"], ["t_y"])],
                      helper.make_tensor_value_info("t_y", F, [2, 3]),
                      [helper.make_node("ReduceSum", ["x"], ["e_y"], keepdims=0)],
                      helper.make_tensor_value_info("e_y", F, []))
    node = next(n for n in model.graph if n.op_type == "If")
    assert "shapes" in why_not_lowerable(node)
    with pytest.warns(UserWarning, match="If node 'guarded' stays in the graph.*shapes"):
        assert IfToWhere().apply(model, _ctx("webgpu")) == 0
    assert _ops(model).count("If") == 1


def test_near_miss_unknown_branch_shapes_stay():
    model = _if_model([helper.make_node("Identity", ["x"], ["t_y"])],
                      helper.make_tensor_value_info("t_y", F, None),
                      [helper.make_node("Neg", ["x"], ["e_y"])],
                      helper.make_tensor_value_info("e_y", F, None))
    with pytest.warns(UserWarning, match="not fully known"):
        assert IfToWhere().apply(model, _ctx("webgpu")) == 0
    assert "If" in _ops(model)


def test_near_miss_loop_in_branch_stays_with_warning():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "acc_in"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [2, 3])])
    then_nodes = [
        helper.make_node("Constant", [], ["trip"], value=helper.make_tensor("v", TensorProto.INT64, [], [3])),
        helper.make_node("Loop", ["trip", "", "x"], ["t_y"], body=body),
    ]
    model = _if_model(then_nodes, helper.make_tensor_value_info("t_y", F, [2, 3]),
                      [helper.make_node("Neg", ["x"], ["e_y"])],
                      helper.make_tensor_value_info("e_y", F, [2, 3]), [2, 3])
    before = _run(model, {"x": X_POS, "c": np.array(True)})
    with pytest.warns(UserWarning, match="control flow \\(Loop\\)"):
        assert IfToWhere().apply(model, _ctx("webgpu")) == 0
    assert "If" in _ops(model) and "Loop" in _ops(model)
    np.testing.assert_array_equal(_run(model, {"x": X_POS, "c": np.array(True)})[0], before[0])


def test_near_miss_random_op_in_branch_stays():
    model = _if_model([helper.make_node("RandomUniformLike", ["x"], ["t_y"])],
                      helper.make_tensor_value_info("t_y", F, [2, 3]),
                      [helper.make_node("Neg", ["x"], ["e_y"])],
                      helper.make_tensor_value_info("e_y", F, [2, 3]), [2, 3])
    with pytest.warns(UserWarning, match="nondeterministic"):
        assert IfToWhere().apply(model, _ctx("webgpu")) == 0


def test_branch_of_identity_and_constant_keeps_output_name():
    model = _if_model([helper.make_node("Constant", [], ["t_y"], value=helper.make_tensor(
                          "v", F, [2, 3], [9.0] * 6))],
                      helper.make_tensor_value_info("t_y", F, [2, 3]),
                      [helper.make_node("Identity", ["x"], ["e_y"])],
                      helper.make_tensor_value_info("e_y", F, [2, 3]), [2, 3])
    feeds = [{"x": X_POS, "c": np.array(c)} for c in (True, False)]
    expected = [_run(model, f)[0] for f in feeds]
    assert IfToWhere().apply(model, _ctx("webgpu")) == 1
    assert [o.name for o in model.graph.outputs] == ["y"]
    for f, want in zip(feeds, expected):
        np.testing.assert_array_equal(_run(model, f)[0], want)


@pytest.mark.parametrize("ep", ["default", "cpu", "cuda", "mlx", "trt-rtx"])
def test_gating_noop_where_if_is_supported(ep):
    assert not IfToWhere().applies(_ctx(ep))
    model = _two_output_if()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimize_model(model, ep, "f32")
    assert "If" in _ops(model)


@pytest.mark.parametrize("ep", ["webgpu", "dml"])
def test_gating_applies_from_capability_data(ep):
    assert IfToWhere().applies(_ctx(ep))
    model = _two_output_if()
    report = optimize_model(model, ep, "f32")
    assert report.matched("IfToWhere") == 1
    assert "If" not in _ops(model)
