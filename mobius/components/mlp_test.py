"""GatedMLP: down(act(gate(x)) * up(x)) vs transformers' LlamaMLP / ACT2FN, ± bias
(transformers' side recorded at build time, mlp_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import mlp_cases as cases
from mobius.components.activations import SUPPORTED_ACTIVATIONS
from mobius.components.mlp import GatedMLP
from mobius.context import build_context
from mobius.errors import ConfigError
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.recorded_arrays import load

HIDDEN, INTER = cases.HIDDEN, cases.INTER


def _mobius(tmp_path, state, activation, bias, x, dtype=ir.DataType.FLOAT):
    with build_context(None, dtype):
        mlp = GatedMLP(HIDDEN, INTER, activation, bias)
    attach_arrays(mlp, state, tmp_path)
    model = component_model([("x", dtype, ["batch", "seq", HIDDEN])],
                            lambda op, x_: mlp(op, x_), ["y"])
    (y,) = run_model(model, {"x": x})
    return y


def _hf_mlp(activation, bias):
    """transformers' LlamaMLP state and its recorded run (x, y)."""
    case = cases.case_name(activation, bias)
    return load(cases, case, "state"), load(cases, case)


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_pytorch_tanh", "gelu_new", "relu"])
def test_matches_transformers(tmp_path, activation, bias):
    state, run = _hf_mlp(activation, bias)
    assert set(state) == {f"{p}.{w}" for p in ("gate_proj", "up_proj", "down_proj")
                          for w in (("weight", "bias") if bias else ("weight",))}
    got = _mobius(tmp_path, state, activation, bias, run["x"])
    np.testing.assert_allclose(got, run["y"], rtol=1e-5, atol=1e-5)


def test_f16(tmp_path):
    state, run = load(cases, "f16", "state"), load(cases, "f16")
    x, expected = run["x"].astype(np.float16), run["y"]
    got = _mobius(tmp_path, state, "silu", False, x, ir.DataType.FLOAT16)
    assert got.dtype == np.float16
    # Two matmuls over 24 and 56 terms with f16 weights/activations (eps 2^-10):
    # errors stay within ~1% of the output scale.
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=0, atol=1e-2 * scale)


def test_activations_cover_the_supported_list():
    act2fn = set(load(cases, "activations")["names"].tolist())
    for name in SUPPORTED_ACTIVATIONS:
        assert name in act2fn  # each one has a transformers meaning we can test against


def test_unsupported_activation_is_a_config_error(tmp_path):
    state, _ = _hf_mlp("silu", False)
    with pytest.raises(ConfigError, match=r"hidden_act 'mish' is not supported; supported: silu"):
        _mobius(tmp_path, state, "mish", False, np.zeros((1, 1, HIDDEN), np.float32))
