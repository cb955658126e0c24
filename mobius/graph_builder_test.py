"""mobius.graph_builder: memoized signatures and inference change nothing a graph holds."""

import numpy as np
import onnx_ir as ir
import pytest
from onnxscript._internal import builder as onnxscript_builder

from mobius import graph_builder


def _layer(op, x, scale):
    """[batch, 8, 4] -> [batch, 8, 4] through ops with int / list attributes, a small
    constant input, two outputs and a symbolic dim."""
    y = op.Add(op.Transpose(op.Mul(op.Transpose(x, perm=[0, 2, 1]), scale), perm=[0, 2, 1]), x)
    top, indices = op.TopK(y, op.Constant(value_ints=[2]), axis=-1, _outputs=2)
    return op.Concat(op.Cast(indices, to=ir.DataType.FLOAT), top, axis=-1)


def _build(builder_class):
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape(["batch", 8, 4]))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": 23}, name="g")
    builder = builder_class(graph)
    scale = builder.initializer(ir.tensor(np.float32(2.0)), name="scale")
    out = _layer(builder.op, _layer(builder.op, x, scale), scale)  # a repeated layer
    graph.outputs.append(out)
    return graph


def _types_and_shapes(graph):
    return [(v.name, v.type, None if v.shape is None else list(v.shape.dims))
            for node in graph for v in node.outputs]


def test_graph_equals_onnxscripts_builder():
    graph_builder._INFERRED.clear()
    ours = _types_and_shapes(_build(graph_builder.GraphBuilder))
    theirs = _types_and_shapes(_build(onnxscript_builder.GraphBuilder))
    assert ours == theirs
    assert any(isinstance(d, ir.SymbolicDim) for _, _, dims in ours if dims for d in dims)


def test_inference_memo_is_used_and_gives_fresh_shapes():
    graph_builder._INFERRED.clear()
    first = _build(graph_builder.GraphBuilder)
    memoized = len(graph_builder._INFERRED)
    assert memoized > 0
    second = _build(graph_builder.GraphBuilder)  # every node's inference is a memo hit
    assert len(graph_builder._INFERRED) == memoized
    assert _types_and_shapes(first) == _types_and_shapes(second)
    shapes = [v.shape for g in (first, second) for n in g for v in n.outputs if v.shape]
    assert len({id(s) for s in shapes}) == len(shapes)  # no shape object shared


def test_memo_key_tells_constant_inputs_apart():
    """A Reshape's small constant shape input decides its output shape."""
    graph_builder._INFERRED.clear()
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 6]))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": 23}, name="g")
    op = graph_builder.GraphBuilder(graph).op
    a = op.Reshape(x, op.Constant(value_ints=[3, 4]))
    b = op.Reshape(x, op.Constant(value_ints=[4, 3]))
    assert list(a.shape.dims) == [3, 4] and list(b.shape.dims) == [4, 3]


def test_schema_memo_is_onnxs_lookup_per_opset():
    graph = ir.Graph([], [], nodes=[], opset_imports={"": 23}, name="g")
    builder = graph_builder.GraphBuilder(graph)
    add = builder._get_schema("Add", "", 23)
    assert add is builder._get_schema("Add", "", 23)
    assert (add.name, add.since_version) == ("Add", 14)  # the newest Add up to opset 23
    assert builder._get_schema("Add", "", 7).since_version == 7
    assert builder._get_schema("Probe", "test", 1) is None  # no schema: attributes by keyword


def test_positional_attributes_still_split():
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3]))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": 23}, name="g")
    op = graph_builder.GraphBuilder(graph).op
    y = op.Softmax(x, -1)  # axis given positionally
    assert y.producer().attributes["axis"].value == -1


def test_build_function_declares_absent_inputs():
    a = ir.Value(name="a", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    function = graph_builder.build_function(
        lambda op, x, bias: op.Add(x, op.Constant(value_float=1.0)) if bias is None else x,
        [a, None], domain="test.domain", name="AddOne", opset=23)
    assert [v.name for v in function.inputs] == ["a", "input_1"]
    assert [n.op_type for n in function] == ["Constant", "Add"]
    assert not function.graph.initializers


def _attribute_graph(builder_class, **attributes):
    """One custom-domain node (no schema: every keyword is an attribute) per attribute."""
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2]))
    graph = ir.Graph([x], [], nodes=[], opset_imports={"": 23, "test": 1}, name="g")
    op = builder_class(graph).opset("test", 1)
    for name, value in attributes.items():
        op.Probe(x, **{name: value})
    return graph


def _attributes(graph):
    return [(a.name, a.type, a.value, type(a.value)) for n in graph for a in n.attributes.values()]


def test_list_attributes_are_typed_as_onnx_ir_types_them():
    attributes = dict(ints=[0, 2, 1], int_tuple=(3, -1), bools=[True, 2], floats=[0.5, 1e-6],
                      float_tuple=(2.0,), strings=["a", "bc"], string_tuple=("x",), empty=[],
                      int=3, float=0.5, string="s",
                      tensor=ir.tensor(np.arange(3, dtype=np.int64)))
    ours = _attributes(_attribute_graph(graph_builder.GraphBuilder, **attributes))
    theirs = _attributes(_attribute_graph(onnxscript_builder.GraphBuilder, **attributes))
    assert ours == theirs  # names, types, values and value types
    kind = ir.AttributeType
    assert [a[1] for a in ours] == [kind.INTS] * 3 + [kind.FLOATS] * 2 + [kind.STRINGS] * 2 + [
        kind.INTS, kind.INT, kind.FLOAT, kind.STRING, kind.TENSOR]


def test_empty_list_attribute_left_to_onnx_ir(caplog):
    """Its type is ambiguous: onnx_ir warns and picks INTS, as without this builder."""
    graph = _attribute_graph(graph_builder.GraphBuilder, empty=[])
    assert _attributes(graph) == [("empty", ir.AttributeType.INTS, (), tuple)]
    assert "empty sequence" in caplog.text


def test_typed_attribute_serializes_as_onnx_irs():
    kwargs = dict(perm=[0, 2, 1], scales=(0.5, 2.0), names=["q", "k"])
    ours = _attribute_graph(graph_builder.GraphBuilder, **kwargs)
    theirs = _attribute_graph(onnxscript_builder.GraphBuilder, **kwargs)
    assert (ir.serde.serialize_graph(ours).SerializeToString()
            == ir.serde.serialize_graph(theirs).SerializeToString())


def test_mixed_list_attribute_still_rejected():
    with pytest.raises(TypeError, match="Unsupported attribute type"):
        _attribute_graph(graph_builder.GraphBuilder, mixed=[1, 2.0])
