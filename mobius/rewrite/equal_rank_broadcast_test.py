"""EqualRankBroadcast: And of a rank-2 and a rank-4 input -> both at rank 4."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.ep.registry import get_ep
from mobius.rewrite.equal_rank_broadcast import EqualRankBroadcast
from mobius.rewrite.rule import RuleContext
from mobius.roles import DECODER
from testing.onnx_graphs import component_model, run_model

BOOL = ir.DataType.BOOL
WEBGPU = RuleContext(get_ep("webgpu"), ir.DataType.FLOAT16, DECODER)


def _masks(op, grid, window, padding):
    """The window mask's pattern: a [seq, total] grid And-ed with rank-4 terms, both sides."""
    allowed = op.And(grid, window)  # rank 2 first
    allowed = op.And(padding, allowed)  # equal ranks: left alone
    return op.And(allowed, grid)  # rank 2 second


def _model():
    return component_model(
        inputs=[("grid", BOOL, [4, 7]), ("window", BOOL, [1, 1, 4, 7]),
                ("padding", BOOL, [1, 1, 1, 7])],
        forward=_masks, outputs=["y"])


def test_every_lower_rank_input_gets_the_full_rank():
    model = _model()
    assert EqualRankBroadcast().apply(model, WEBGPU) == 2
    for node in model.graph:
        if node.op_type == "And":
            assert [len(v.shape) for v in node.inputs] == [4, 4], node
    squeezes = [n for n in model.graph if n.op_type == "Unsqueeze"]
    assert [list(n.outputs[0].shape) for n in squeezes] == [[1, 1, 4, 7]] * 2


def test_same_output():
    rng = np.random.default_rng(0)
    feeds = {"grid": rng.random((4, 7)) > 0.3, "window": rng.random((1, 1, 4, 7)) > 0.3,
             "padding": rng.random((1, 1, 1, 7)) > 0.2}
    before = run_model(_model(), feeds)[0]
    model = _model()
    EqualRankBroadcast().apply(model, WEBGPU)
    after = run_model(model, feeds)[0]
    assert after.shape == before.shape == (1, 1, 4, 7)
    assert before.any() and not before.all()
    np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("ep", ["cpu", "cuda", "openvino"])
def test_not_legal_where_and_broadcasts_across_ranks(ep):
    assert not EqualRankBroadcast().applies(RuleContext(get_ep(ep), ir.DataType.FLOAT, DECODER))
