"""Mamba2Mixer vs transformers' GraniteMoeHybridMambaLayer (f32, every parameter random).

The ONNX mixer runs a sequence in pieces (prefill, then one-token steps), carrying
its conv and recurrent state; transformers runs the whole sequence at once with no
cache. A causal recurrence gives the same outputs either way, so this checks the
chunked scan (several chunks, a zero-padded last one), the single-step form, the
state hand-over and the padding mask at once. transformers' side is recorded at build
time (mamba2_cases.py).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import mamba2_cases as cases
from mobius.components.mamba2 import Mamba2Dims, Mamba2Mixer
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, to_proto
from testing.recorded_arrays import load

HIDDEN, SEQ = cases.HIDDEN, cases.SEQ


def _session(tmp_path, groups, chunk, proj_bias):
    import onnxruntime as ort

    case = cases.case_name(groups, chunk, proj_bias)
    dims = Mamba2Dims(HIDDEN, 6, 8, groups, 10, 4, chunk)
    with build_context(None, ir.DataType.FLOAT):
        mixer = Mamba2Mixer(dims, proj_bias=proj_bias)
    attach_arrays(mixer, load(cases, case, "state"), tmp_path)
    (_, conv_dims), (_, state_dims) = dims.state_dims()
    model = component_model(
        [("h", ir.DataType.FLOAT, ["batch", "seq", HIDDEN]),
         ("m", ir.DataType.FLOAT, ["batch", "seq", 1]),
         ("conv", ir.DataType.FLOAT, ["batch", *conv_dims]),
         ("state", ir.DataType.FLOAT, ["batch", *state_dims])],
        lambda op, h, m, conv, state: mixer(op, h, m, conv, state),
        [("y", ["batch", "seq", HIDDEN]), ("conv_out", ["batch", *conv_dims]),
         ("state_out", ["batch", *state_dims])])
    session = ort.InferenceSession(to_proto(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session, load(cases, case), conv_dims, state_dims


@pytest.mark.parametrize("groups,chunk,proj_bias", cases.LAYERS)
def test_pieces_match_the_whole_sequence(tmp_path, groups, chunk, proj_bias):
    session, recorded, conv_dims, state_dims = _session(tmp_path, groups, chunk, proj_bias)
    hidden, mask, expected = recorded["hidden"], recorded["mask"], recorded["y"]
    assert not mask[1, :3].any() and mask[0].all()  # row 1 left-padded
    conv = np.zeros((2, *conv_dims), np.float32)
    state = np.zeros((2, *state_dims), np.float32)
    outputs = []
    for start, stop in [(0, 8), (8, 9), (9, 10), (10, 11)]:
        y, conv, state = session.run(None, {"h": hidden[:, start:stop],
                                            "m": mask[:, start:stop, None],
                                            "conv": conv, "state": state})
        outputs.append(y)
    got = np.concatenate(outputs, axis=1)
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], expected[real], rtol=1e-4, atol=1e-5)


def test_right_padding_keeps_the_state(tmp_path):
    """onnxruntime-genai right-pads a batch of prompts: the padded row must leave the
    prefill with the state of its real tokens alone (dt is 0 at padding; the conv state
    ends at the last real token), and decode on from there exactly as unpadded."""
    session, _, conv_dims, state_dims = _session(tmp_path, 2, 4, True)
    rng = np.random.default_rng(1)
    prompt = rng.standard_normal((1, 5, HIDDEN)).astype(np.float32)
    steps = rng.standard_normal((1, 3, HIDDEN)).astype(np.float32)
    padded = np.concatenate([prompt, rng.standard_normal((1, 3, HIDDEN)).astype(np.float32)], 1)
    runs = []
    for hidden, real in ((prompt, 5), (padded, 5)):
        mask = np.zeros((1, hidden.shape[1], 1), np.float32)
        mask[:, :real] = 1
        zeros = (np.zeros((1, *conv_dims), np.float32), np.zeros((1, *state_dims), np.float32))
        y, conv, state = session.run(None, {"h": hidden, "m": mask, "conv": zeros[0],
                                            "state": zeros[1]})
        outputs = [y[:, :real]]
        for t in range(steps.shape[1]):
            y, conv, state = session.run(None, {"h": steps[:, t:t + 1], "m": np.ones((1, 1, 1),
                                                np.float32), "conv": conv, "state": state})
            outputs.append(y)
        runs.append(np.concatenate(outputs, axis=1))
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-6)
