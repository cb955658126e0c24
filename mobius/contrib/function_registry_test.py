"""attach_function: a body is built once per (op, overload, input types) and every model gets
its own clone of it."""

from __future__ import annotations

import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

_calls: list[str] = []


def _attach(dtype: ir.DataType, overload: str) -> tuple[ir.Model, ir.Function]:
    x = ir.Value(name="x", type=ir.TensorType(dtype), shape=ir.Shape([2]))
    model = ir.Model(ir.Graph([x], [], nodes=[], opset_imports={"": 23}), ir_version=10)
    node = ir.Node(MS_DOMAIN, "RegistryTestOp", [x], num_outputs=1)

    def body(op, value):
        _calls.append(overload)
        return op.Relu(value)

    attach_function(model, node, body, [x.type], overload)
    return model, model.functions[(MS_DOMAIN, "RegistryTestOp", overload)]


def test_each_model_gets_its_own_copy_of_a_body_built_once():
    _, first = _attach(ir.DataType.FLOAT, "once")
    _, second = _attach(ir.DataType.FLOAT, "once")
    assert _calls.count("once") == 1
    assert first is not second and [n.op_type for n in second] == ["Relu"]
    first.append(ir.node("Abs", [first.outputs[0]]))  # a pass editing one model's body
    assert [n.op_type for n in second] == ["Relu"]
    assert [n.op_type for n in _attach(ir.DataType.FLOAT, "once")[1]] == ["Relu"]


def test_other_input_types_or_overloads_get_their_own_body():
    _, f32 = _attach(ir.DataType.FLOAT, "typed")
    _, f16 = _attach(ir.DataType.FLOAT16, "typed")
    _, other = _attach(ir.DataType.FLOAT, "other")
    assert _calls.count("typed") == 2 and _calls.count("other") == 1
    assert f32.inputs[0].type.dtype == ir.DataType.FLOAT
    assert f16.inputs[0].type.dtype == ir.DataType.FLOAT16
    assert other.overload == "other"
