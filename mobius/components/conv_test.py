"""Conv1d vs torch.nn.Conv1d (Whisper's two front-end convolutions and variants), f32."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import torch

from mobius.components.conv import Conv1d, weight_norm
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model

IN, OUT, LENGTH = 6, 10, 14


@pytest.mark.parametrize("kernel,stride,padding,bias", [
    (3, 1, 1, True),   # Whisper conv1
    (3, 2, 1, True),   # Whisper conv2: halves the length
    (5, 1, 0, False),  # no padding, no bias
    (4, 3, 2, True),   # even kernel, stride that does not divide the length
])
def test_matches_torch(tmp_path, kernel, stride, padding, bias):
    torch.manual_seed(0)
    ref = torch.nn.Conv1d(IN, OUT, kernel, stride=stride, padding=padding, bias=bias).eval()
    state = {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()}
    with build_context(None, ir.DataType.FLOAT):
        conv = Conv1d(IN, OUT, kernel, stride=stride, padding=padding, bias=bias)
    attach_arrays(conv, state, tmp_path)
    model = component_model([("x", ir.DataType.FLOAT, ["batch", IN, LENGTH])],
                            lambda op, x: conv(op, x), ["y"])
    x = np.random.default_rng(0).standard_normal((2, IN, LENGTH)).astype(np.float32)
    (y,) = run_model(model, {"x": x})
    with torch.no_grad():
        expected = ref(torch.from_numpy(x)).numpy()
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_weight_keeps_the_checkpoint_layout():
    with build_context(None, ir.DataType.FLOAT16):
        conv = Conv1d(IN, OUT, 3, bias=False)
    assert list(conv.weight.shape) == [OUT, IN, 3]
    assert conv.weight.checkpoint_shape == (OUT, IN, 3) and conv.weight.transform is None
    assert conv.weight.dtype == ir.DataType.FLOAT16 and conv.bias is None


@pytest.mark.parametrize("parametrized", [True, False], ids=["parametrizations", "weight_g_v"])
@pytest.mark.parametrize("kernel", [4, 5])
def test_grouped_weight_norm_same_padding_matches_torch(tmp_path, kernel, parametrized):
    """wav2vec2's positional conv: groups, weight_norm(dim=2) from either spelling, and
    padding k // 2 with the last output of an even kernel dropped (pads (k//2, k//2 - 1))."""
    torch.manual_seed(0)
    norm = torch.nn.utils.parametrizations.weight_norm if parametrized else (
        torch.nn.utils.weight_norm)
    ref = norm(torch.nn.Conv1d(OUT, OUT, kernel, padding=kernel // 2, groups=2), dim=2).eval()
    state = {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()}
    assert len(state) == 3, sorted(state)
    with build_context(None, ir.DataType.FLOAT):
        conv = Conv1d(OUT, OUT, kernel, padding=(kernel // 2, kernel // 2 - 1 + kernel % 2),
                      groups=2)
        conv.weight = weight_norm([OUT, OUT // 2, kernel], dim=2)
    attach_arrays(conv, state, tmp_path)
    model = component_model([("x", ir.DataType.FLOAT, ["batch", OUT, LENGTH])],
                            lambda op, x: conv(op, x), ["y"])
    x = np.random.default_rng(0).standard_normal((2, OUT, LENGTH)).astype(np.float32)
    (y,) = run_model(model, {"x": x})
    with torch.no_grad():
        expected = ref(torch.from_numpy(x)).numpy()[:, :, :LENGTH]
    assert y.shape == (2, OUT, LENGTH)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
