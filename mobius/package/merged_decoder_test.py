"""decoder_model_merged.onnx (mobius/package/merged_decoder.py): each branch of the If
computes what the unmerged first-step / with-past decoder (the same build without the
merge) computes on the same feeds, in onnxruntime, and every weight is one initializer
of the outer graph."""

from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest

from mobius.builder import build
from mobius.package import transformers_js
from mobius.tiny.checkpoint import make_tiny_checkpoint


@pytest.fixture(scope="module", params=["tiny-t5", "tiny-whisper"])
def folders(request, tmp_path_factory):
    """(the transformers.js package, the optimum package built without the merge: its
    decoder_model.onnx and decoder_with_past_model.onnx) of one tiny checkpoint."""
    tmp = tmp_path_factory.mktemp(request.param)
    ckpt = make_tiny_checkpoint(request.param, str(tmp / "ckpt"))
    merged = build(ckpt, execution_provider="cpu", layout="transformers.js").save(str(tmp / "js"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transformers_js, "merge_decoder_files", lambda models: models)
        split = build(ckpt, execution_provider="cpu", layout="optimum").save(str(tmp / "split"))
    return merged, split


def _session(path: str) -> ort.InferenceSession:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"])


def _feeds(*sessions: ort.InferenceSession) -> dict[str, np.ndarray]:
    """Random feeds for the unmerged decoders' inputs: batch 2, 3 new tokens, 5 past
    positions, 6 encoder positions (whisper's encoder length is fixed)."""
    rng = np.random.default_rng(0)
    sizes = {"batch_size": 2, "sequence_length": 3, "past_sequence_length": 5,
             "encoder_sequence_length": 6}
    feeds = {}
    for value in (v for session in sessions for v in session.get_inputs()):
        shape = [d if isinstance(d, int) else sizes[d] for d in value.shape]
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
    split = {file: _session(os.path.join(optimum, file + ".onnx"))
             for file in ("decoder_model", "decoder_with_past_model")}
    feeds = _feeds(*split.values())
    for branch, file in ((False, "decoder_model"), (True, "decoder_with_past_model")):
        alone = split[file]
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
