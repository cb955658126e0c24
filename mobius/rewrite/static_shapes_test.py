"""StaticShapes: a decoder's symbolic I/O dims become the EP's static ones."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.ep.registry import get_ep
from mobius.rewrite.library_passes import ConstantFolding
from mobius.rewrite.rule import RuleContext
from mobius.rewrite.static_shapes import StaticShapes
from mobius.roles import DECODER, ENCODER
from testing.onnx_graphs import component_model, run_model

F32 = ir.DataType.FLOAT
QNN = RuleContext(get_ep("qnn"), F32, DECODER)  # 256 slots, chunk 8


def _step(op, ids, mask, past):
    """A cache step in miniature: present = Concat(past, new rows), reshaped by Shape math."""
    new = op.Unsqueeze(op.Cast(ids, to=F32), op.Constant(value_ints=[1, 3]))
    present = op.Concat(past, op.Expand(new, op.Constant(value_ints=[1, 2, 1, 4])), axis=2)
    rows = op.Mul(op.Cast(mask, to=F32), op.ReduceSum(present, op.Constant(value_ints=[1, 3]), keepdims=0))
    return present, op.Reshape(rows, op.Shape(mask))


def _model():
    return component_model(
        inputs=[("input_ids", ir.DataType.INT64, ["batch_size", "sequence_length"]),
                ("attention_mask", ir.DataType.INT64, ["batch_size", "total_sequence_length"]),
                ("past", F32, ["batch_size", 2, "past_sequence_length", 4])],
        forward=_step, outputs=[("present", ["batch_size", 2, "total_sequence_length", 4]),
                                ("rows", ["batch_size", "total_sequence_length"])])


def test_io_dims_become_the_eps_static_ones():
    model = _model()
    assert StaticShapes().apply(model, QNN) == 5
    shapes = {v.name: list(v.shape) for v in [*model.graph.inputs, *model.graph.outputs]}
    assert shapes == {"input_ids": [1, 8], "attention_mask": [1, 256], "past": [1, 2, 248, 4],
                      "present": [1, 2, 256, 4], "rows": [1, 256]}


def test_shape_arithmetic_folds_away_and_the_step_still_runs():
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 9, (1, 8)), "attention_mask": np.ones((1, 256), np.int64),
             "past": rng.standard_normal((1, 2, 248, 4)).astype(np.float32)}
    before = run_model(_model(), feeds)
    model = _model()
    StaticShapes().apply(model, QNN)
    ConstantFolding().apply(model, QNN)
    assert "Shape" not in [n.op_type for n in model.graph]
    for got, expected in zip(run_model(model, feeds), before):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("ctx", [RuleContext(get_ep("qnn"), F32, ENCODER),
                                 RuleContext(get_ep("cpu"), F32, DECODER),
                                 RuleContext(get_ep("openvino"), F32, DECODER)])
def test_only_static_eps_decoders(ctx):
    assert not StaticShapes().applies(ctx)
