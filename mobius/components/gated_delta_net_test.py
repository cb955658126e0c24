"""GatedDeltaNet vs a numpy reference of the layer written from its definition.

The reference runs the gated delta rule one token at a time (the recurrence as
the papers state it, no chunking) on checkpoint-layout weights (in_proj_qkvz /
in_proj_ba interleaved per key head), every parameter random. The ONNX layer
runs the sequence in pieces (a chunked prefill, then one-token steps) carrying
its conv and recurrent states, so this checks the chunked form (several chunks,
a zero-padded last one), the state hand-over, the row reordering and the
key-head grouping at once; then left and right padding. Qwen 3.5's unfused layout
(in_proj_qkv / _z / _b / _a) is the same weights split, and must match the same reference.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.gated_delta_net import DeltaNetDims, GatedDeltaNet
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, to_proto

HIDDEN, SEQ, EPS = 24, 11, 1e-6


def _weights(dims: DeltaNetDims, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    r = lambda *shape, s=0.5: (rng.standard_normal(shape) * s).astype(np.float32)  # noqa: E731
    qkvz = 2 * dims.keys + 2 * dims.values
    return {"in_proj_qkvz.weight": r(qkvz, dims.hidden), "in_proj_ba.weight": r(
        2 * dims.value_heads, dims.hidden), "conv1d.weight": r(dims.conv_dim, 1, dims.conv_kernel),
        "dt_bias": r(dims.value_heads), "A_log": r(dims.value_heads),
        "norm.weight": 1 + r(dims.value_dim, s=0.1), "out_proj.weight": r(dims.hidden, dims.values)}


def _silu(x):
    return x / (1 + np.exp(-x))


def reference(w: dict, d: DeltaNetDims, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """float64 layer over whole sequences, zero initial states; mask [batch, seq] (0/1)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    batch, seq, _ = hidden.shape
    x = hidden * mask[..., None]
    per = d.value_heads // d.key_heads
    groups = (x @ w["in_proj_qkvz.weight"].T).reshape(batch, seq, d.key_heads, -1)
    q, k, v, z = np.split(groups, np.cumsum([d.key_dim, d.key_dim, per * d.value_dim]), axis=-1)
    b, a = np.split((x @ w["in_proj_ba.weight"].T).reshape(batch, seq, d.key_heads, 2 * per),
                    2, axis=-1)
    mixed = np.concatenate([t.reshape(batch, seq, -1) for t in (q, k, v)], axis=-1)
    kernel = w["conv1d.weight"][:, 0]  # [channels, width]
    padded = np.concatenate([np.zeros((batch, d.conv_kernel - 1, d.conv_dim)), mixed], axis=1)
    mixed = _silu(sum(padded[:, j:j + seq] * kernel[:, j] for j in range(d.conv_kernel)))
    q, k, v = np.split(mixed, [d.keys, 2 * d.keys], axis=-1)
    q, k = (t.reshape(batch, seq, d.key_heads, d.key_dim) for t in (q, k))
    q, k = (np.repeat(t / np.sqrt((t * t).sum(-1, keepdims=True) + 1e-6), per, axis=2)
            for t in (q, k))
    q = q / np.sqrt(d.key_dim)
    v = v.reshape(batch, seq, d.value_heads, d.value_dim)
    beta = 1 / (1 + np.exp(-b.reshape(batch, seq, -1)))
    g = -np.exp(w["A_log"]) * np.log1p(np.exp(a.reshape(batch, seq, -1) + w["dt_bias"]))
    state = np.zeros((batch, d.value_heads, d.key_dim, d.value_dim))
    y = np.zeros((batch, seq, d.value_heads, d.value_dim))
    for t in range(seq):
        state = state * np.exp(g[:, t])[..., None, None]
        error = v[:, t] - np.einsum("bhkv,bhk->bhv", state, k[:, t])
        state = state + np.einsum("bhk,bhv->bhkv", k[:, t], error * beta[:, t][..., None])
        y[:, t] = np.einsum("bhkv,bhk->bhv", state, q[:, t])
    y = y / np.sqrt((y * y).mean(-1, keepdims=True) + EPS) * w["norm.weight"]
    y = y.reshape(batch, seq, -1) * _silu(z.reshape(batch, seq, -1))
    return y @ w["out_proj.weight"].T


DIMS = {"grouped_chunk3": DeltaNetDims(HIDDEN, 2, 4, 8, 6, 4, 3),
        "ungrouped_chunk64": DeltaNetDims(HIDDEN, 3, 3, 10, 8, 3, 64)}


def unfused(weights: dict, dims: DeltaNetDims) -> dict[str, np.ndarray]:
    """The same layer in Qwen 3.5's checkpoint layout: contiguous [q, k, v], z, b, a."""
    qkvz = weights["in_proj_qkvz.weight"][dims.qkvz_rows()]
    ba = weights["in_proj_ba.weight"][dims.ba_rows()]
    rest = {k: v for k, v in weights.items() if not k.startswith(("in_proj_qkvz", "in_proj_ba"))}
    return {**rest, "in_proj_qkv.weight": qkvz[:dims.conv_dim],
            "in_proj_z.weight": qkvz[dims.conv_dim:], "in_proj_b.weight": ba[:dims.value_heads],
            "in_proj_a.weight": ba[dims.value_heads:]}


def _session(tmp_path, dims, weights, fused=True):
    import onnxruntime as ort

    with build_context(None, ir.DataType.FLOAT):
        layer = GatedDeltaNet(dims, eps=EPS, fused_projections=fused)
    attach_arrays(layer, weights if fused else unfused(weights, dims), tmp_path)
    (_, conv_dims), (_, state_dims) = dims.state_dims()
    model = component_model(
        [("h", ir.DataType.FLOAT, ["batch", "seq", HIDDEN]),
         ("m", ir.DataType.FLOAT, ["batch", "seq", 1]),
         ("conv", ir.DataType.FLOAT, ["batch", *conv_dims]),
         ("state", ir.DataType.FLOAT, ["batch", *state_dims])],
        lambda op, h, m, conv, state: layer(op, h, m, conv, state),
        [("y", ["batch", "seq", HIDDEN]), ("conv_out", ["batch", *conv_dims]),
         ("state_out", ["batch", *state_dims])])
    session = ort.InferenceSession(to_proto(model).SerializeToString(),
                                   providers=["CPUExecutionProvider"])

    def run(hidden, mask, states=None):
        if states is None:
            states = (np.zeros((hidden.shape[0], *conv_dims), np.float32),
                      np.zeros((hidden.shape[0], *state_dims), np.float32))
        y, conv, state = session.run(None, {"h": hidden, "m": mask[..., None], "conv": states[0],
                                            "state": states[1]})
        return y, (conv, state)
    return run


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("case", sorted(DIMS))
def test_pieces_match_the_token_by_token_recurrence(tmp_path, case, fused):
    dims = DIMS[case]
    weights = _weights(dims)
    run = _session(tmp_path, dims, weights, fused)
    rng = np.random.default_rng(1)
    hidden = rng.standard_normal((2, SEQ, HIDDEN)).astype(np.float32)
    mask = np.ones((2, SEQ), np.float32)
    mask[1, :3] = 0  # row 1 left-padded
    expected = reference(weights, dims, hidden, mask)
    outputs, states = [], None
    for start, stop in [(0, 8), (8, 9), (9, 10), (10, 11)]:
        y, states = run(hidden[:, start:stop], mask[:, start:stop], states)
        outputs.append(y)
    got = np.concatenate(outputs, axis=1)
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], expected[real], rtol=1e-4, atol=1e-5)


def test_right_padding_keeps_the_state(tmp_path):
    """onnxruntime-genai right-pads a batch of prompts: the padded row leaves the prefill
    with the state of its real tokens alone (beta and g are 0 at padding; the conv state
    ends at the last real token), and decodes on from there exactly as unpadded."""
    dims = DIMS["grouped_chunk3"]
    run = _session(tmp_path, dims, _weights(dims))
    rng = np.random.default_rng(2)
    prompt = rng.standard_normal((1, 5, HIDDEN)).astype(np.float32)
    steps = rng.standard_normal((1, 3, HIDDEN)).astype(np.float32)
    padded = np.concatenate([prompt, rng.standard_normal((1, 3, HIDDEN)).astype(np.float32)], 1)
    runs = []
    for hidden in (prompt, padded):
        mask = np.zeros(hidden.shape[:2], np.float32)
        mask[:, :5] = 1
        y, states = run(hidden, mask)
        outputs = [y[:, :5]]
        for t in range(steps.shape[1]):
            y, states = run(steps[:, t:t + 1], np.ones((1, 1), np.float32), states)
            outputs.append(y)
        runs.append(np.concatenate(outputs, axis=1))
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-5, atol=1e-6)
