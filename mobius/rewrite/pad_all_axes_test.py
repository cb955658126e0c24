"""PadAllAxes: Pad(x, pads, value, axes) -> Pad(x, pads of every axis, value)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.ep.registry import get_ep
from mobius.rewrite.pad_all_axes import PadAllAxes
from mobius.rewrite.rule import RuleContext
from mobius.roles import DECODER
from testing.onnx_graphs import component_model, run_model

F32 = ir.DataType.FLOAT
OPENVINO = RuleContext(get_ep("openvino"), F32, DECODER)


def _pads(op, x, n):
    """Two pads with axes: a computed one on axis 1 (as the SSD scan's) and a constant one."""
    ints = lambda *v: op.Constant(value_ints=list(v))  # noqa: E731
    tail = op.Reshape(n, ints(1))
    y = op.Pad(x, op.Concat(ints(0), tail, axis=0), None, ints(1))
    return op.Pad(y, ints(1, 2, 0, 1), op.Constant(value=ir.tensor(np.float32(7))), ints(-1, 0))


def _model():
    return component_model(inputs=[("x", F32, [2, 3, 4]), ("n", ir.DataType.INT64, [])],
                           forward=_pads, outputs=["y"])


def test_every_pad_loses_its_axes_input():
    model = _model()
    assert PadAllAxes().apply(model, OPENVINO) == 2
    pads = [n for n in model.graph if n.op_type == "Pad"]
    assert [len(n.inputs) for n in pads] == [2, 3]


def test_same_output():
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3, 4), np.float32),
             "n": np.array(2, np.int64)}
    before = run_model(_model(), feeds)[0]
    model = _model()
    PadAllAxes().apply(model, OPENVINO)
    after = run_model(model, feeds)[0]
    assert after.shape == before.shape == (5, 5, 5)
    np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("ep", ["cpu", "default", "onnx-standard"])
def test_not_legal_where_pad_takes_axes(ep):
    assert not PadAllAxes().applies(RuleContext(get_ep(ep), F32, DECODER))
