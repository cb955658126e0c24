"""Conv1d vs torch.nn.Conv1d (Whisper's two front-end convolutions and variants), f32
(torch's side recorded at build time, conv_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import conv_cases as cases
from mobius.components.conv import Conv1d, weight_norm
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.recorded_arrays import load

IN, OUT, LENGTH = cases.IN, cases.OUT, cases.LENGTH


@pytest.mark.parametrize("kernel,stride,padding,bias", cases.CONVS)
def test_matches_torch(tmp_path, kernel, stride, padding, bias):
    case = cases.conv_case(kernel, stride, padding, bias)
    state, run = load(cases, case, "state"), load(cases, case)
    with build_context(None, ir.DataType.FLOAT):
        conv = Conv1d(IN, OUT, kernel, stride=stride, padding=padding, bias=bias)
    attach_arrays(conv, state, tmp_path)
    model = component_model([("x", ir.DataType.FLOAT, ["batch", IN, LENGTH])],
                            lambda op, x: conv(op, x), ["y"])
    (y,) = run_model(model, {"x": run["x"]})
    expected = run["y"]
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_weight_keeps_the_checkpoint_layout():
    with build_context(None, ir.DataType.FLOAT16):
        conv = Conv1d(IN, OUT, 3, bias=False)
    assert list(conv.weight.shape) == [OUT, IN, 3]
    assert conv.weight.checkpoint_shape == (OUT, IN, 3) and conv.weight.transform is None
    assert conv.weight.dtype == ir.DataType.FLOAT16 and conv.bias is None


@pytest.mark.parametrize("kernel,parametrized", cases.WEIGHT_NORMS)
def test_grouped_weight_norm_same_padding_matches_torch(tmp_path, kernel, parametrized):
    """wav2vec2's positional conv: groups, weight_norm(dim=2) from either spelling, and
    padding k // 2 with the last output of an even kernel dropped (pads (k//2, k//2 - 1))."""
    case = cases.weight_norm_case(kernel, parametrized)
    state, run = load(cases, case, "state"), load(cases, case)
    assert len(state) == 3, sorted(state)
    with build_context(None, ir.DataType.FLOAT):
        conv = Conv1d(OUT, OUT, kernel, padding=(kernel // 2, kernel // 2 - 1 + kernel % 2),
                      groups=2)
        conv.weight = weight_norm([OUT, OUT // 2, kernel], dim=2)
    attach_arrays(conv, state, tmp_path)
    model = component_model([("x", ir.DataType.FLOAT, ["batch", OUT, LENGTH])],
                            lambda op, x: conv(op, x), ["y"])
    (y,) = run_model(model, {"x": run["x"]})
    expected = run["y"][:, :, :LENGTH]
    assert y.shape == (2, OUT, LENGTH)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
