"""Int32GraphIO: int64 graph inputs/outputs -> int32 (names kept, Casts only where needed)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.optimize.pipeline import optimize_model
from mobius.rewrite.int32_io import Int32GraphIO
from mobius.rewrite.rule import RuleContext

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
NO_INT64 = EpCapabilities(name="test-no-int64", supports_int64=False)


def _ctx(ep) -> RuleContext:
    return RuleContext(get_ep(ep), ir.DataType.FLOAT, "decoder")


def _decoderish() -> ir.Model:
    """input_ids -> embedding Gather; attention_mask -> Cast + ReduceSum (int64 out);
    position_ids -> Add (int64 arithmetic) -> int64 output; a float and an int32 input."""
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["hidden"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=F),
        helper.make_node("ReduceSum", ["attention_mask", "axis1"], ["lengths"], keepdims=0),
        helper.make_node("Add", ["position_ids", "one"], ["next_positions"]),
        helper.make_node("Mul", ["scale", "scale"], ["scale2"]),
        helper.make_node("Identity", ["already32"], ["same32"]),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("input_ids", I64, ["batch_size", "sequence_length"]),
         helper.make_tensor_value_info("attention_mask", I64, ["batch_size", "total_sequence_length"]),
         helper.make_tensor_value_info("position_ids", I64, ["batch_size", "sequence_length"]),
         helper.make_tensor_value_info("scale", F, [1]),
         helper.make_tensor_value_info("already32", I32, [2])],
        [helper.make_tensor_value_info("hidden", F, ["batch_size", "sequence_length", 4]),
         helper.make_tensor_value_info("mask_f", F, ["batch_size", "total_sequence_length"]),
         helper.make_tensor_value_info("lengths", I64, ["batch_size"]),
         helper.make_tensor_value_info("next_positions", I64, ["batch_size", "sequence_length"]),
         helper.make_tensor_value_info("scale2", F, [1]),
         helper.make_tensor_value_info("same32", I32, [2])],
        initializer=[helper.make_tensor("emb", F, [11, 4], np.arange(44, dtype=np.float32)),
                     helper.make_tensor("axis1", I64, [1], [1]),
                     helper.make_tensor("one", I64, [], [1])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    onnx.checker.check_model(proto, full_check=True)
    return ir.serde.deserialize_model(proto)


def _session(model: ir.Model):
    proto = ir.serde.serialize_model(model)
    onnx.checker.check_model(proto, full_check=True)
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


_DTYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32}


def _run(model: ir.Model, feeds):
    session = _session(model)
    typed = {i.name: feeds[i.name].astype(_DTYPES[i.type]) for i in session.get_inputs()}
    return session.run(None, typed)


FEEDS = {
    "input_ids": np.array([[1, 10, 3], [0, 2, 7]], np.int64),
    "attention_mask": np.array([[1, 1, 1, 1], [0, 1, 1, 1]], np.int64),
    "position_ids": np.array([[3, 4, 5], [2, 3, 4]], np.int64),
    "scale": np.array([1.5], np.float32),
    "already32": np.array([7, 8], np.int32),
}


def test_int64_io_becomes_int32_with_same_values():
    model = _decoderish()
    expected = _run(model, FEEDS)
    assert Int32GraphIO().apply(model, _ctx("webgpu")) == 5  # 3 inputs + 2 outputs
    io = list(model.graph.inputs) + list(model.graph.outputs)
    assert not [v.name for v in io if v.dtype == ir.DataType.INT64]
    assert [v.name for v in model.graph.inputs] == list(FEEDS)
    assert [v.name for v in model.graph.outputs] == [
        "hidden", "mask_f", "lengths", "next_positions", "scale2", "same32"]
    by_name = {v.name: v for v in io}
    assert by_name["input_ids"].shape == ir.Shape(["batch_size", "sequence_length"])
    assert by_name["lengths"].shape == ir.Shape(["batch_size"])
    for got, want in zip(_run(model, FEEDS), expected):
        np.testing.assert_array_equal(got, want.astype(got.dtype))
        assert got.dtype != np.int64


def test_int32_is_propagated_where_every_consumer_accepts_it():
    model = _decoderish()
    Int32GraphIO().apply(model, _ctx("webgpu"))
    gather = next(n for n in model.graph if n.op_type == "Gather")
    assert gather.inputs[1].name == "input_ids"  # no Cast: Gather takes int32 indices
    assert gather.inputs[1].dtype == ir.DataType.INT32
    cast_from = {n.inputs[0].name for n in model.graph
                 if n.op_type == "Cast" and n.attributes["to"].value == ir.DataType.INT64}
    # the mask feeds ReduceSum (int64 arithmetic) and position_ids feeds Add: both widened once
    assert cast_from == {"attention_mask", "position_ids"}
    to_float = next(n for n in model.graph
                    if n.op_type == "Cast" and n.attributes["to"].value == ir.DataType.FLOAT)
    assert to_float.inputs[0].name == "attention_mask"  # Cast reads int32 directly


def test_near_miss_non_int64_io_is_untouched():
    model = _decoderish()
    Int32GraphIO().apply(model, _ctx("webgpu"))
    by_name = {v.name: v for v in list(model.graph.inputs) + list(model.graph.outputs)}
    assert by_name["scale"].dtype == ir.DataType.FLOAT
    assert by_name["already32"].dtype == ir.DataType.INT32
    assert by_name["same32"].producer().op_type == "Identity"
    # internal int64 values (initializers, arithmetic) are not graph I/O: left alone
    assert model.graph.initializers["one"].dtype == ir.DataType.INT64
    assert Int32GraphIO().apply(model, _ctx("webgpu")) == 0  # idempotent


@pytest.mark.parametrize("ep", ["default", "cpu", "cuda", "dml", "mlx", "trt-rtx"])
def test_gating_noop_where_int64_is_supported(ep):
    assert not Int32GraphIO().applies(_ctx(ep))
    model = _decoderish()
    optimize_model(model, ep, "f32", model_role="encoder")
    assert model.graph.inputs[0].dtype == ir.DataType.INT64


def test_gating_from_capability_data_in_pipeline():
    model = _decoderish()
    report = optimize_model(model, NO_INT64, "f32", model_role="encoder")
    assert report.matched("Int32GraphIO") == 5
    assert not [v for v in list(model.graph.inputs) + list(model.graph.outputs)
                if v.dtype == ir.DataType.INT64]
    for got, want in zip(_run(model, FEEDS), _run(_decoderish(), FEEDS)):
        np.testing.assert_array_equal(got, want.astype(got.dtype))
