"""GPTQ on synthetic layers: its output error ``X W - X Q`` beats RTN's on inputs it was
not fitted to, act order beats the natural order, and without correlated inputs
to exploit it is RTN exactly.

The inputs mix their channels (a random linear map) and scale them unevenly,
as a layer's activations do; the Gram matrix comes from one half of the
tokens and the error is measured on the other. Error feedback that is
missing or wrong leaves GPTQ at (or above) RTN's error, failing the ratio.
"""

import numpy as np
import pytest

from mobius.quantize.gptq import DAMPING, gptq_factor, quantize_gptq_kn
from mobius.quantize.rtn import MINMAX, MSE, quantize_rtn_kn

K, N, TOKENS = 256, 96, 2048


def _layer(seed: int = 0):
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(K, K)) / np.sqrt(K)
    x = (rng.normal(size=(TOKENS, K)) @ mix + 0.3 * rng.normal(size=(TOKENS, K)))
    x = (x * rng.uniform(0.2, 3.0, size=K)).astype(np.float32)
    weight = rng.normal(size=(K, N)).astype(np.float32)
    fit, held_out = x[: TOKENS // 2], x[TOKENS // 2 :]
    return weight, fit.T.astype(np.float64) @ fit, held_out


def _gptq(weight, gram, bits=4, block=32, symmetric=True, method=MSE, damping=0.01,
          act_order=True):
    """GPTQ at the paper's 1% damping unless told (the synthetic inputs are plentiful)."""
    return quantize_gptq_kn(weight, gptq_factor(gram, damping, act_order), bits, block,
                            symmetric, method)


def _output_error(x: np.ndarray, weight: np.ndarray, quantized) -> float:
    return float(np.linalg.norm(x @ weight - x @ quantized.dequantize().T))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("method", [MSE, MINMAX])
def test_output_error_below_rtn_on_held_out_inputs(bits, symmetric, method):
    weight, gram, x = _layer()
    rtn = quantize_rtn_kn(weight, bits, 32, symmetric, method)
    gptq = _gptq(weight, gram, bits, 32, symmetric, method)
    assert (gptq.zero_points is None) == symmetric
    assert gptq.codes.max() < 2**bits
    ratio = _output_error(x, weight, gptq) / _output_error(x, weight, rtn)
    assert ratio < 0.9, f"GPTQ output error {ratio:.3f} x RTN's"
    damped = _gptq(weight, gram, bits, 32, symmetric, method, damping=DAMPING)
    assert _output_error(x, weight, damped) < 0.97 * _output_error(x, weight, rtn)


@pytest.mark.parametrize("symmetric", [True, False])
def test_act_order_beats_the_natural_order(symmetric):
    """Channels of very unequal activity (the synthetic scales span 15x): rounding the
    busiest first leaves the others to absorb their error."""
    weight, gram, x = _layer(5)
    natural = _gptq(weight, gram, symmetric=symmetric, act_order=False)
    ordered = _gptq(weight, gram, symmetric=symmetric)
    ratio = _output_error(x, weight, ordered) / _output_error(x, weight, natural)
    assert ratio < 0.93, f"act order output error {ratio:.3f} x the natural order's"


def test_act_order_is_by_decreasing_activity_and_scales_are_rtns():
    """The factor orders channels by their diagonal of H (dead ones last); every block's
    scale is RTN's on the float weight, whatever the order."""
    weight, gram, _ = _layer(6)
    gram[3, :] = gram[:, 3] = 0
    factor = gptq_factor(gram)
    assert factor.order[-1] == 3
    assert (np.diff(np.diag(gram)[factor.order]) <= 0).all()
    gptq = quantize_gptq_kn(weight, factor, 4, 32, False)
    rtn = quantize_rtn_kn(weight, 4, 32, False)
    np.testing.assert_array_equal(gptq.scales, rtn.scales)
    np.testing.assert_array_equal(gptq.zero_points, rtn.zero_points)


def test_weight_error_stays_bounded():
    """Error feedback moves weights, it does not run away: each weight stays within a
    few steps of its float value."""
    weight, gram, _ = _layer(1)
    gptq = _gptq(weight, gram)
    step = np.abs(gptq.scales[:, gptq.block_of_channel()])
    assert (np.abs(gptq.dequantize() - weight.T) / step).max() < 8


@pytest.mark.parametrize("act_order", [True, False])
@pytest.mark.parametrize("symmetric", [True, False])
def test_uncorrelated_inputs_give_rtn_exactly(symmetric, act_order):
    weight, _, _ = _layer(2)
    scales = np.diag(np.random.default_rng(3).uniform(0.5, 2.0, size=K))
    gptq = _gptq(weight, scales, symmetric=symmetric, act_order=act_order)
    rtn = quantize_rtn_kn(weight, 4, 32, symmetric)
    np.testing.assert_array_equal(gptq.codes, rtn.codes)
    np.testing.assert_array_equal(gptq.scales, rtn.scales)


def test_channels_never_seen_are_rounded_plainly():
    """A channel the calibration never activated (zero row and column of H) gets finite
    codes and passes no error on; K not a multiple of the block is padded like RTN."""
    weight, gram, x = _layer(4)
    weight, gram, x = weight[:200], gram[:200, :200].copy(), x[:, :200]
    gram[7, :] = gram[:, 7] = 0
    gptq = _gptq(weight, gram)
    assert np.isfinite(gptq.dequantize()).all()
    assert gptq.scales.shape == (N, 7)
    rtn = quantize_rtn_kn(weight, 4, 32, True)
    assert _output_error(x, weight, gptq) < _output_error(x, weight, rtn)


def test_hessian_of_another_layer_is_refused():
    weight, gram, _ = _layer()
    with pytest.raises(ValueError, match="hessian shape"):
        _gptq(weight, gram[:128, :128])
