"""attach_weights: an unread checkpoint tensor is an error unless declared ignorable."""

from __future__ import annotations

import os

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.linear import Linear
from mobius.context import build_context
from mobius.errors import WeightsError
from mobius.weights.attach import IgnoredTensors, attach_weights
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors


def _checkpoint(folder, extra: tuple[str, ...]) -> SafetensorsCheckpoint:
    rng = np.random.default_rng(0)
    arrays = {"weight": rng.standard_normal((3, 4)).astype(np.float32),
              "bias": rng.standard_normal(3).astype(np.float32)}
    arrays.update({name: np.ones(2, np.float32) for name in extra})
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, "model.safetensors"), arrays)
    return SafetensorsCheckpoint(str(folder))


def _linear() -> Linear:
    with build_context(None, ir.DataType.FLOAT):
        return Linear(4, 3, bias=True)


def test_every_tensor_read_attaches(tmp_path):
    linear = _linear()
    attach_weights(linear, _checkpoint(tmp_path, ()))
    assert linear.bias.const_value is not None


def test_an_unread_tensor_is_an_error(tmp_path):
    with pytest.raises(WeightsError, match=r"does not read 1 checkpoint tensor.*'extra.scale'"):
        attach_weights(_linear(), _checkpoint(tmp_path, ("extra.scale",)))


def test_a_declared_tensor_may_stay_unread(tmp_path, caplog):
    ignorable = (IgnoredTensors(r"rotary\.inv_freq", "recomputed from the config"),)
    with caplog.at_level("INFO", logger="mobius.weights.attach"):
        attach_weights(_linear(), _checkpoint(tmp_path, ("rotary.inv_freq",)),
                       ignorable=ignorable)
    assert "rotary.inv_freq" in caplog.text


def test_the_pattern_matches_the_whole_name(tmp_path):
    """A declaration for ``rotary.inv_freq`` does not cover ``rotary.inv_freq_extra``."""
    ignorable = (IgnoredTensors(r"rotary\.inv_freq", "recomputed from the config"),)
    with pytest.raises(WeightsError, match="inv_freq_extra"):
        attach_weights(_linear(), _checkpoint(tmp_path, ("rotary.inv_freq_extra",)),
                       ignorable=ignorable)
