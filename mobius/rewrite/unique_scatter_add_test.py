"""UniqueScatterAdd: the MoE combine's ScatterND add over NonZero rows -> plain ScatterND."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.ep.registry import get_ep
from mobius.rewrite.rule import RuleContext
from mobius.rewrite.unique_scatter_add import UniqueScatterAdd
from mobius.roles import DECODER
from testing.onnx_graphs import component_model, run_model

F32 = ir.DataType.FLOAT
OPENVINO = RuleContext(get_ep("openvino"), F32, DECODER)


def _combine(op, x, weight, index_from_nonzero=True):
    """out += rows at the tokens whose weight is positive, twice (two experts)."""
    zero = op.Constant(value=ir.tensor(np.float32(0)))
    out = x
    for scale in (2.0, -3.0):
        if index_from_nonzero:
            index = op.Transpose(op.NonZero(op.Greater(weight, zero)), perm=[1, 0])
        else:  # an index nothing proves unique
            index = op.Constant(value=ir.tensor(np.array([[0, 1], [0, 1]], np.int64)))
        rows = op.Mul(op.GatherND(x, index), op.Constant(value=ir.tensor(np.float32(scale))))
        out = op.ScatterND(out, index, rows, reduction="add")
    return out


def _model(unique=True):
    return component_model(inputs=[("x", F32, [2, 3, 4]), ("weight", F32, [2, 3])],
                           forward=lambda op, x, w: _combine(op, x, w, unique), outputs=["y"])


def _feeds():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((2, 3, 4), np.float32),
            "weight": np.array([[1, -1, 2], [0, 3, -2]], np.float32)}


def test_scatter_add_becomes_plain_scatter():
    model = _model()
    assert UniqueScatterAdd().apply(model, OPENVINO) == 2
    scatters = [n for n in model.graph if n.op_type == "ScatterND"]
    assert len(scatters) == 2 and all("reduction" not in n.attributes for n in scatters)


def test_same_output():
    before = run_model(_model(), _feeds())
    model = _model()
    UniqueScatterAdd().apply(model, OPENVINO)
    np.testing.assert_allclose(run_model(model, _feeds())[0], before[0], rtol=1e-6, atol=1e-6)


def test_repeated_indices_keep_the_reduction():
    """Two updates of one slot would overwrite each other without the reduction."""
    model = _model(unique=False)
    assert UniqueScatterAdd().apply(model, OPENVINO) == 0


@pytest.mark.parametrize("ep", ["cpu", "default", "onnx-standard"])
def test_not_legal_where_scatter_nd_reduces(ep):
    assert not UniqueScatterAdd().applies(RuleContext(get_ep(ep), F32, DECODER))
