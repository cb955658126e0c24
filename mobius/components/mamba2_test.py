"""Mamba2Mixer vs transformers' GraniteMoeHybridMambaLayer (f32, every parameter random).

The ONNX mixer runs a sequence in pieces (prefill, then one-token steps), carrying
its conv and recurrent state; transformers runs the whole sequence at once with no
cache. A causal recurrence gives the same outputs either way, so this checks the
chunked scan (several chunks, a zero-padded last one), the single-step form, the
state hand-over and the padding mask at once.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import torch
import transformers

from mobius.components.mamba2 import Mamba2Dims, Mamba2Mixer
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, to_proto

HIDDEN, SEQ = 24, 11


def _reference(groups: int, chunk: int, proj_bias: bool):
    from transformers.models.granitemoehybrid import modeling_granitemoehybrid as m

    config = transformers.GraniteMoeHybridConfig(
        hidden_size=HIDDEN, mamba_n_heads=6, mamba_n_groups=groups, mamba_d_state=10,
        mamba_d_head=8, mamba_expand=2, mamba_d_conv=4, mamba_chunk_size=chunk,
        mamba_proj_bias=proj_bias, num_hidden_layers=1, layer_types=["linear_attention"])
    torch.manual_seed(0)
    layer = m.GraniteMoeHybridMambaLayer(config, 0).eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return config, layer


def _session(tmp_path, groups, chunk, proj_bias):
    import onnxruntime as ort

    _, ref = _reference(groups, chunk, proj_bias)
    dims = Mamba2Dims(HIDDEN, 6, 8, groups, 10, 4, chunk)
    with build_context(None, ir.DataType.FLOAT):
        mixer = Mamba2Mixer(dims, proj_bias=proj_bias)
    attach_arrays(mixer, {k: v.detach().numpy() for k, v in ref.state_dict().items()}, tmp_path)
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
    return session, ref, conv_dims, state_dims


@pytest.mark.parametrize("groups,chunk,proj_bias", [(1, 256, False), (2, 4, True), (3, 3, False)])
def test_pieces_match_the_whole_sequence(tmp_path, groups, chunk, proj_bias):
    session, ref, conv_dims, state_dims = _session(tmp_path, groups, chunk, proj_bias)
    rng = np.random.default_rng(0)
    hidden = rng.standard_normal((2, SEQ, HIDDEN)).astype(np.float32)
    mask = np.ones((2, SEQ), np.float32)
    mask[1, :3] = 0  # row 1 left-padded
    with torch.no_grad():
        expected = ref(torch.from_numpy(hidden), attention_mask=torch.from_numpy(mask)).numpy()
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
