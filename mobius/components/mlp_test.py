"""GatedMLP: down(act(gate(x)) * up(x)) vs transformers' LlamaMLP / ACT2FN, ± bias."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import torch
import transformers

from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaMLP

from mobius.components.activations import SUPPORTED_ACTIVATIONS
from mobius.components.mlp import GatedMLP
from mobius.context import build_context
from mobius.errors import ConfigError
from testing.onnx_graphs import attach_arrays, component_model, run_model

HIDDEN, INTER = 24, 56


def _mobius(tmp_path, state, activation, bias, x, dtype=ir.DataType.FLOAT):
    with build_context(None, dtype):
        mlp = GatedMLP(HIDDEN, INTER, activation, bias)
    attach_arrays(mlp, state, tmp_path)
    model = component_model([("x", dtype, ["batch", "seq", HIDDEN])],
                            lambda op, x_: mlp(op, x_), ["y"])
    (y,) = run_model(model, {"x": x})
    return y


def _hf_mlp(activation, bias, seed=0):
    config = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTER,
                                      num_attention_heads=4, hidden_act=activation,
                                      mlp_bias=bias)
    torch.manual_seed(seed)
    module = LlamaMLP(config).eval()
    if bias:
        with torch.no_grad():
            for name, p in module.named_parameters():
                if name.endswith("bias"):
                    p.normal_()
    state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    return module, state


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_pytorch_tanh", "gelu_new", "relu"])
def test_matches_transformers(tmp_path, activation, bias):
    module, state = _hf_mlp(activation, bias)
    assert set(state) == {f"{p}.{w}" for p in ("gate_proj", "up_proj", "down_proj")
                          for w in (("weight", "bias") if bias else ("weight",))}
    x = np.random.default_rng(0).standard_normal((2, 4, HIDDEN)).astype(np.float32)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    got = _mobius(tmp_path, state, activation, bias, x)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_f16(tmp_path):
    module, state = _hf_mlp("silu", False)
    x = np.random.default_rng(1).standard_normal((2, 4, HIDDEN)).astype(np.float16)
    with torch.no_grad():
        expected = module(torch.from_numpy(x.astype(np.float32))).numpy()
    got = _mobius(tmp_path, state, "silu", False, x, ir.DataType.FLOAT16)
    assert got.dtype == np.float16
    # Two matmuls over 24 and 56 terms with f16 weights/activations (eps 2^-10):
    # errors stay within ~1% of the output scale.
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=0, atol=1e-2 * scale)


def test_activations_cover_the_supported_list():
    for name in SUPPORTED_ACTIVATIONS:
        assert name in ACT2FN  # each one has a transformers meaning we can test against


def test_unsupported_activation_is_a_config_error(tmp_path):
    module, state = _hf_mlp("silu", False)
    with pytest.raises(ConfigError, match=r"hidden_act 'mish' is not supported; supported: silu"):
        _mobius(tmp_path, state, "mish", False, np.zeros((1, 1, HIDDEN), np.float32))
