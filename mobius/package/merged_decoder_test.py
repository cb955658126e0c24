"""decoder_model_merged.onnx (mobius/package/merged_decoder.py): each branch of the If
computes what the optimum layout's first-step / with-past decoder computes on the same
feeds, in onnxruntime, and every weight is one initializer of the outer graph."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest

from mobius.builder import build
from mobius.tiny.checkpoint import make_tiny_checkpoint


@pytest.fixture(scope="module", params=["tiny-t5", "tiny-whisper"])
def folders(request, tmp_path_factory):
    """(the transformers.js package, the optimum package) of one tiny checkpoint."""
    tmp = tmp_path_factory.mktemp(request.param)
    ckpt = make_tiny_checkpoint(request.param, str(tmp / "ckpt"))
    return tuple(build(ckpt, execution_provider="cpu", layout=layout).save(str(tmp / layout))
                 for layout in ("transformers.js", "optimum"))


def _session(path: str) -> ort.InferenceSession:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def _feeds(session: ort.InferenceSession) -> dict[str, np.ndarray]:
    """Random feeds for every input but use_cache_branch: batch 2, 3 new tokens, 5 past
    positions, 6 encoder positions (whisper's encoder length is fixed)."""
    rng = np.random.default_rng(0)
    sizes = {"batch_size": 2, "sequence_length": 3, "past_sequence_length": 5,
             "encoder_sequence_length": 6}
    feeds = {}
    for value in session.get_inputs():
        shape = [d if isinstance(d, int) else sizes.get(d, 2) for d in value.shape]
        if value.name == "use_cache_branch":
            continue
        if value.type == "tensor(int64)":
            feeds[value.name] = (np.ones(shape, np.int64) if "mask" in value.name
                                 else rng.integers(3, 40, shape))
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def test_each_branch_is_its_decoder(folders):
    js, optimum = folders
    merged = _session(os.path.join(js, "onnx", "decoder_model_merged.onnx"))
    names = [o.name for o in merged.get_outputs()]
    feeds = _feeds(merged)
    for branch, file in ((False, "decoder_model"), (True, "decoder_with_past_model")):
        alone = _session(os.path.join(optimum, file + ".onnx"))
        want = alone.run(None, {v.name: feeds[v.name] for v in alone.get_inputs()})
        got = dict(zip(names, merged.run(None, {**feeds, "use_cache_branch": np.array([branch])})))
        for value, expected in zip(alone.get_outputs(), want):
            np.testing.assert_array_equal(got[value.name], expected, err_msg=value.name)
        # the with-past branch returns no cross K/V: its clients keep the ones they fed
        missing = [n for n in names if n not in {v.name for v in alone.get_outputs()}]
        assert branch == bool(missing) and all(got[n].size == 0 for n in missing), missing
    assert "use_cache_branch" in [i.name for i in merged.get_inputs()]


def test_weights_are_stored_once(folders):
    js, optimum = folders
    merged = os.path.getsize(os.path.join(js, "onnx", "decoder_model_merged.onnx_data"))
    first = os.path.getsize(os.path.join(optimum, "decoder_model.onnx.data"))
    with_past = os.path.getsize(os.path.join(optimum, "decoder_with_past_model.onnx.data"))
    assert merged <= 1.01 * first < with_past + first, (merged, first, with_past)
    assert merged < 0.6 * (first + with_past), (merged, first, with_past)
