"""RTN: every element within half a step of a float reference, all bit/block/sym cases."""

import numpy as np
import pytest

from mobius.errors import WeightsError
from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.quantize.rtn import quantize_rtn


def _reference_step(qw: QuantizedWeight) -> np.ndarray:
    return np.abs(qw.scales[:, qw.block_of_channel()])


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("block", [16, 32, 128])
@pytest.mark.parametrize("symmetric", [True, False])
def test_reconstruction_within_half_a_step(bits, block, symmetric):
    rng = np.random.default_rng(bits * block + symmetric)
    weight = rng.standard_normal((37, 200)).astype(np.float32) * rng.uniform(0.01, 3, (37, 1))
    weight[3, :] += 2.5  # an all-positive row: asymmetric blocks must still cover it
    qw = quantize_rtn(weight, bits, block, symmetric)
    assert qw.codes.max() < 2**bits
    assert (qw.zero_points is None) == symmetric
    error = np.abs(qw.dequantize() - weight) / _reference_step(qw)
    assert error.max() <= 0.5 + 1e-4


def test_exact_grid_is_reproduced():
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 16, (8, 64)).astype(np.uint8)
    codes[:, ::32] = 15  # each block reaches both ends of the grid
    codes[:, 1::32] = 0
    zeros = rng.integers(0, 16, (8, 2)).astype(np.uint8)
    scales = rng.uniform(0.01, 1, (8, 2)).astype(np.float32)
    exact = QuantizedWeight(codes, scales, zeros, 4, 32).dequantize()
    again = quantize_rtn(exact, 4, 32, symmetric=False)
    np.testing.assert_allclose(again.dequantize(), exact, rtol=0, atol=1e-6)


def test_zero_block_keeps_zero():
    weight = np.zeros((2, 32), np.float32)
    weight[1, :16] = 1.0
    for symmetric in (True, False):
        qw = quantize_rtn(weight, 4, 16, symmetric)
        np.testing.assert_allclose(qw.dequantize(), weight, atol=1e-7)


def test_bad_shapes_are_named():
    with pytest.raises(WeightsError, match="scales have shape"):
        QuantizedWeight(np.zeros((4, 64), np.uint8), np.ones((4, 3), np.float32), None, 4, 32)
    with pytest.raises(WeightsError, match="bits 3"):
        QuantizedWeight(np.zeros((4, 64), np.uint8), np.ones((4, 2), np.float32), None, 3, 32)
