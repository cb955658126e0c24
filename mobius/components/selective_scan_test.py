"""selective_scan (Mamba v1's closed-form chunked scan) vs the step-by-step recurrence.

The reference is the recurrence itself in numpy (float64), from a random carried
state: every chunking (one chunk, several with a zero-padded last one, one position
per chunk) and a one-token step must give its outputs and final state. The mixer
around it is checked against transformers by ssm_families_test.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.selective_scan import selective_scan
from testing.onnx_graphs import component_model, to_proto

CHANNELS, SIZE = 6, 5
FLOAT = ir.DataType.FLOAT


def _recurrence(x, dt, a, b, c, state):
    """The scan as transformers' sequential path computes it."""
    state, ys = state.astype(np.float64), []
    for t in range(x.shape[1]):
        state = (np.exp(dt[:, t, :, None] * a) * state
                 + (dt[:, t] * x[:, t])[:, :, None] * b[:, t, None, :])
        ys.append(np.einsum("bdn,bn->bd", state, c[:, t]))
    return np.stack(ys, axis=1), state


def _session(chunk):
    import onnxruntime as ort

    model = component_model(
        [("x", FLOAT, ["batch", "seq", CHANNELS]), ("dt", FLOAT, ["batch", "seq", CHANNELS]),
         ("a", FLOAT, [CHANNELS, SIZE]), ("b", FLOAT, ["batch", "seq", SIZE]),
         ("c", FLOAT, ["batch", "seq", SIZE]), ("state", FLOAT, ["batch", CHANNELS, SIZE])],
        lambda op, *args: selective_scan(op, *args, chunk),
        [("y", ["batch", "seq", CHANNELS]), ("final", ["batch", CHANNELS, SIZE])])
    return ort.InferenceSession(to_proto(model).SerializeToString(),
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("chunk,seq", [(16, 10), (4, 10), (3, 9), (1, 5), (8, 1)])
def test_chunked_scan_is_the_recurrence(chunk, seq):
    rng = np.random.default_rng(seq * 31 + chunk)
    inputs = {
        "x": rng.standard_normal((2, seq, CHANNELS)),
        "dt": rng.uniform(0.05, 1.0, (2, seq, CHANNELS)),
        "a": -np.exp(rng.standard_normal((CHANNELS, SIZE))),
        "b": rng.standard_normal((2, seq, SIZE)),
        "c": rng.standard_normal((2, seq, SIZE)),
        "state": rng.standard_normal((2, CHANNELS, SIZE)),
    }
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    y, final = _session(chunk).run(None, inputs)
    want_y, want_final = _recurrence(**inputs)
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(final, want_final, rtol=1e-4, atol=1e-4)


def test_zero_steps_keep_the_state():
    """dt = 0 (padding) leaves the state and adds nothing, wherever the padding sits."""
    rng = np.random.default_rng(3)
    inputs = {"x": rng.standard_normal((1, 7, CHANNELS)),
              "dt": rng.uniform(0.05, 1.0, (1, 7, CHANNELS)),
              "a": -np.exp(rng.standard_normal((CHANNELS, SIZE))),
              "b": rng.standard_normal((1, 7, SIZE)), "c": rng.standard_normal((1, 7, SIZE)),
              "state": rng.standard_normal((1, CHANNELS, SIZE))}
    inputs = {k: v.astype(np.float32) for k, v in inputs.items()}
    real = [0, 1, 4, 5]
    padded = dict(inputs, dt=inputs["dt"].copy())
    padded["dt"][:, [2, 3, 6]] = 0.0
    compact = dict(inputs, **{k: inputs[k][:, real] for k in ("x", "dt", "b", "c")})
    session = _session(3)
    _, final = session.run(None, padded)
    _, want = session.run(None, compact)
    np.testing.assert_allclose(final, want, rtol=1e-5, atol=1e-5)
