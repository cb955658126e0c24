"""Sentence pooling (mobius/components/pooling.py) vs numpy written from the definitions,
right- and left-padded, every mode, with and without L2 normalization."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.pooling import MODES, pool
from mobius.errors import UnsupportedModelError
from testing.onnx_graphs import component_model, run_model

HIDDEN = 12


def _batch(left: bool, seed: int = 0):
    """Three rows of 6 slots with 6, 4 and 1 real tokens."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((3, 6, HIDDEN)) * 2 + 0.5).astype(np.float32)
    mask = np.zeros((3, 6), np.int64)
    for row, count in enumerate((6, 4, 1)):
        if left:
            mask[row, 6 - count:] = 1
        else:
            mask[row, :count] = 1
    return x, mask


def _reference(x, mask, mode):
    rows = []
    for b in range(x.shape[0]):
        real = x[b][mask[b].astype(bool)]  # the row's real tokens, in order
        rows.append({"cls": real[0], "lasttoken": real[-1], "max": real.max(0),
                     "mean": real.mean(0), "mean_sqrt_len_tokens": real.sum(0) / np.sqrt(len(real))
                     }[mode])
    return np.stack(rows)


def _run(x, mask, modes, normalize, dtype=ir.DataType.FLOAT):
    model = component_model(
        [("x", dtype, ["batch", "seq", HIDDEN]), ("mask", ir.DataType.INT64, ["batch", "seq"])],
        lambda op, x_, m_: pool(op, x_, m_, modes, normalize, dtype),
        [("y", ["batch", HIDDEN * len(modes)])])
    (y,) = run_model(model, {"x": x, "mask": mask})
    return y


@pytest.mark.parametrize("left", [False, True], ids=["right_padded", "left_padded"])
@pytest.mark.parametrize("mode", MODES)
def test_each_mode_matches_its_definition(mode, left):
    x, mask = _batch(left)
    np.testing.assert_allclose(_run(x, mask, (mode,), False), _reference(x, mask, mode),
                               rtol=1e-5, atol=1e-5)


def test_modes_concatenate_in_the_given_order_then_normalize():
    x, mask = _batch(left=False)
    modes = ("max", "cls", "mean")
    expected = np.concatenate([_reference(x, mask, m) for m in modes], axis=-1)
    expected /= np.linalg.norm(expected, axis=-1, keepdims=True)
    got = _run(x, mask, modes, True)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, rtol=1e-5)


def test_padding_values_do_not_leak():
    """Huge values in padded slots change nothing (max, mean and last-token alike)."""
    x, mask = _batch(left=False)
    spoiled = np.where(mask[..., None].astype(bool), x, np.float32(1e4))
    modes = ("max", "mean", "lasttoken", "cls")
    np.testing.assert_allclose(_run(spoiled, mask, modes, False), _run(x, mask, modes, False),
                               rtol=1e-6)


def test_f16_io_pools_in_float32():
    x, mask = _batch(left=False)
    got = _run(x.astype(np.float16), mask, ("mean",), True, ir.DataType.FLOAT16)
    assert got.dtype == np.float16
    expected = _reference(x.astype(np.float16).astype(np.float32), mask, "mean")
    expected /= np.linalg.norm(expected, axis=-1, keepdims=True)
    # one f16 rounding of the unit-norm result: eps(f16)/2 = 4.9e-4
    np.testing.assert_allclose(got.astype(np.float32), expected, atol=1e-3)


@pytest.mark.parametrize("modes", [(), ("weightedmean",)])
def test_unknown_modes_are_refused(modes):
    with pytest.raises(UnsupportedModelError, match="sentence pooling modes"):
        _run(*_batch(left=False), modes, False)
