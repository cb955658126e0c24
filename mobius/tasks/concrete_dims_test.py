"""TaskFlags.use_concrete_dims: what it guarantees, on finished packages."""

from __future__ import annotations

import warnings

import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper

import mobius
from mobius.tasks.causal_lm import NAMED_DIMS
from mobius.tasks.task import TaskFlags
from mobius.tasks.concrete_dims import (
    apply_concrete_dims, check_io_dims, infer_value_shapes, io_dim_problems, values_without_shape,
)

FAMILIES = ("tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3")


def _build(family, ep, dtype="f32"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mobius.build(family, execution_provider=ep, dtype=dtype)


def test_flag_comes_from_capability_data_and_defaults_off():
    assert TaskFlags().use_concrete_dims is False
    assert mobius.get_ep("webgpu").use_concrete_dims is True
    assert mobius.get_ep("cpu").use_concrete_dims is False


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_io_dims_are_ints_or_contract_names(family, dtype, tmp_path):
    package = _build(family, "webgpu", dtype)
    config = package.config
    model = package.models["model"]
    assert io_dim_problems(model, NAMED_DIMS) == []
    shapes = {v.name: list(v.shape) for v in list(model.graph.inputs) + list(model.graph.outputs)}
    batch, seq, total, past = (ir.SymbolicDim(n) for n in NAMED_DIMS)
    assert shapes["input_ids"] == [batch, seq]
    assert shapes["attention_mask"] == [batch, total]
    assert shapes["logits"] == [batch, 1, config.vocab_size]  # the genai layout's last row
    kv = [config.num_key_value_heads, config.head_dim]
    assert shapes["past_key_values.0.key"] == [batch, kv[0], past, kv[1]]
    assert shapes["present.0.value"] == [batch, kv[0], total, kv[1]]
    # and so it is on disk, where a runtime reads it
    proto = onnx.load(package.save(str(tmp_path), overwrite=True) + "/model.onnx",
                      load_external_data=False)
    for value in list(proto.graph.input) + list(proto.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            assert dim.HasField("dim_value") or dim.dim_param in NAMED_DIMS, (value.name, dim)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_every_read_value_has_type_and_shape_in_value_info(family, dtype, tmp_path):
    package = _build(family, "webgpu", dtype)
    model = package.models["model"]
    assert values_without_shape(model) == []
    proto = onnx.load(package.save(str(tmp_path), overwrite=True) + "/model.onnx",
                      load_external_data=False)
    typed = {v.name for v in list(proto.graph.value_info) + list(proto.graph.output)
             if v.type.tensor_type.HasField("shape")}
    read = {i for node in proto.graph.node for i in node.input}
    produced = [o for node in proto.graph.node for o in node.output if o and o in read]
    assert [o for o in produced if o not in typed] == []
    # named dims propagate into the graph: the embedding output is [batch_size, sequence_length, hidden]
    gather = next(n for n in model.graph if n.op_type == "Gather" and n.inputs[1] is not None
                  and n.inputs[1].name == "input_ids")
    assert list(gather.outputs[0].shape) == [ir.SymbolicDim("batch_size"),
                                             ir.SymbolicDim("sequence_length"),
                                             package.config.hidden_size]


def test_io_contract_holds_without_the_flag_too():
    """Guarantee 1 is the task's own contract; the flag makes it enforced (and adds guarantee 2)."""
    model = _build("tiny-llama", "cpu").models["model"]
    assert io_dim_problems(model, NAMED_DIMS) == []


def _model(inputs, outputs, nodes) -> ir.Model:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    return ir.serde.deserialize_model(proto)


def test_check_rejects_anonymous_and_unlisted_dims():
    model = _model([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", None])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", "N"])],
                   [helper.make_node("Identity", ["x"], ["y"])])
    problems = io_dim_problems(model, NAMED_DIMS)
    assert len(problems) == 2
    assert "input 'x' dim 1 is None" in problems[0] and "output 'y' dim 1 is 'N'" in problems[1]
    with pytest.raises(ValueError, match="use_concrete_dims"):
        check_io_dims(model, NAMED_DIMS)
    with pytest.raises(ValueError):
        apply_concrete_dims(model, NAMED_DIMS)


def test_inference_fills_only_what_is_missing():
    model = _model([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", 4])],
                   [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                    helper.make_node("Abs", ["b"], ["y"])])
    a, b = (next(v for n in model.graph for v in n.outputs if v.name == name) for name in "ab")
    a.type, a.shape = None, None
    b.type, b.shape = ir.TensorType(ir.DataType.FLOAT), ir.Shape(["mine", None])
    assert infer_value_shapes(model) == 2
    assert a.dtype == ir.DataType.FLOAT and list(a.shape) == [ir.SymbolicDim("batch_size"), 4]
    assert list(b.shape) == [ir.SymbolicDim("mine"), 4]  # set dims are kept, unknown ones filled


def test_node_by_node_fallback_when_whole_model_inference_fails(caplog):
    """One node onnx rejects must not cost the rest of the graph its shapes."""
    model = _model([helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", 4]),
                    helper.make_tensor_value_info("w", TensorProto.FLOAT, [5, 6])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", 4]),
                    helper.make_tensor_value_info("bad", TensorProto.FLOAT, ["batch_size", 6])],
                   [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["a"], ["c"]),
                    helper.make_node("Relu", ["c"], ["y"]),
                    helper.make_node("MatMul", ["x", "w"], ["bad"])])  # 4 != 5: inference error
    values = {v.name: v for n in model.graph for v in n.outputs}
    for name in "ac":
        values[name].type, values[name].shape = None, None
    with caplog.at_level("INFO", logger="mobius.tasks.concrete_dims"):
        assert infer_value_shapes(model) == 2
    assert "node by node" in caplog.text
    assert list(values["c"].shape) == [ir.SymbolicDim("batch_size"), 4]
    assert values_without_shape(model) == []
