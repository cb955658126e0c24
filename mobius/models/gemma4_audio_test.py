"""Gemma 4's audio tower and embedder (mobius/models/gemma4_audio.py) vs transformers'
Gemma4AudioModel + Gemma4MultimodalEmbedder, f32 (gemma4_audio_cases.py: every
parameter random, clip bounds active, two clips, the second padded): the real soft
tokens within 1e-4 of the largest one (tokens are O(5); measured <= 3.3e-5 of it).
Each switch case, reverted on the same weights, moves the tokens; values transformers
cannot run are refused.

In the package (gemma4_vl_cases.py case "audio": tiny-gemma4-mm written by transformers,
every parameter and clip bound random; a prompt with one clip of 30 frames): speech.onnx's
audio_features and the prefill logits of the speech -> embedding -> decoder chain within
1e-4 of Gemma4ForConditionalGeneration's; onnxruntime-genai 0.18 runs the cpu package as
its gemma4 type (speech model fed audio_embeds, audio_attention_mask, audio_sizes through
set_inputs) and greedy-generates transformers' tokens.

genai's own front end: its processor, driven by the speech_processor.json mobius writes
(Gemma4LogMel), turns the case's audio.wav into transformers' Gemma4AudioFeatureExtractor
log-mel of the same waveform at the checkpoint's 8 bins and at the released 128: the
same real frames, each feature within 1e-5 (float32 FFT against numpy's float64; measured
<= 5e-7 on features of magnitude up to 7).
"""

from __future__ import annotations

import os

import numpy as np
import onnx_ir as ir
import onnxruntime_genai as og
import pytest

from mobius.builder import build
from mobius.context import build_context
from mobius.errors import ConfigError, MobiusError
from mobius.models import gemma4_audio_cases as cases
from mobius.models import gemma4_vl_cases as vl_cases
from mobius.models.gemma4_audio import Gemma4AudioEncoder, audio_options
from mobius.models.gemma4_conditional import SPEECH_PROCESSOR_FILE, speech_processor
from testing import vlm_runs
from testing.gemma4_vl_chain import Chain, processor_package
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.recorded_arrays import load
from testing.reference_cases import case_dir

TOLERANCE = 1e-4


def _tokens(config: dict, recorded: dict, folder) -> np.ndarray:
    with build_context(None, ir.DataType.FLOAT):
        encoder = Gemma4AudioEncoder(audio_options(config), cases.TEXT_HIDDEN)
    weights = {k: v for k, v in recorded.items() if k.startswith(("audio_tower.", "embed_"))}
    attach_arrays(encoder, weights, folder)
    model = component_model(
        [("features", ir.DataType.FLOAT, ["b", "t", cases.MEL]),
         ("mask", ir.DataType.BOOL, ["b", "t"])],
        encoder, [("tokens", ["n", cases.TEXT_HIDDEN])])
    (tokens,) = run_model(model, {"features": recorded["features"], "mask": recorded["mask"]})
    return tokens


@pytest.mark.parametrize("case", cases.CASES)
def test_real_soft_tokens_match_transformers(case, tmp_path):
    recorded = load(cases, case)
    tokens = _tokens(cases.config(case), recorded, tmp_path)
    expected = recorded["tokens"]
    assert tokens.shape == expected.shape, (tokens.shape, expected.shape)
    assert np.abs(tokens - expected).max() <= TOLERANCE * np.abs(expected).max()
    assert np.abs(expected).mean() > 0.1


#: (case, the audio_config edit that reverts one of its switches)
REVERTS = {
    "clipped": ("default", {"use_clipped_linears": False}),
    "act": ("plain", {"hidden_act": "silu"}),
    "kernel": ("plain", {"conv_kernel_size": 3}),
    "cap": ("default", {"attention_logit_cap": 50.0}),
    "gradient_clipping": ("default", {"gradient_clipping": 1e10}),
    "future": ("future", {"attention_context_right": 0}),
    "chunk": ("future", {"attention_chunk_size": 4}),
    "left": ("default", {"attention_context_left": 3}),
    "residual_weight": ("default", {"residual_weight": 0.5}),
    "eps": ("default", {"rms_norm_eps": 1e-1}),
}


@pytest.mark.parametrize("name", sorted(REVERTS))
def test_reverting_a_switch_changes_the_tokens(name, tmp_path):
    case, edit = REVERTS[name]
    recorded = load(cases, case)
    try:
        tokens = _tokens({**cases.config(case), **edit}, recorded, tmp_path)
    except MobiusError as error:  # the reverted tower needs tensors the checkpoint lacks
        assert "tensor" in str(error) or "shape" in str(error), error
        return
    assert np.abs(tokens - recorded["tokens"]).max() > 1e-2, name


REJECTED = {
    "three_convs": ({"subsampling_conv_channels": [8, 4, 4]}, "subsampling_conv_channels"),
    "heads": ({"num_attention_heads": 3}, "num_attention_heads"),
    "left": ({"attention_context_left": 0}, "attention_context_left"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_unsupported_values_are_rejected(name):
    edit, words = REJECTED[name]
    with pytest.raises(ConfigError, match=words):
        audio_options({**cases.BASE, **edit})


@pytest.fixture(scope="module")
def audio_package(tmp_path_factory):
    """(saved cpu f32 package of the audio case, transformers' recorded run)."""
    folder = case_dir(vl_cases, vl_cases.AUDIO)
    package = build(os.path.join(folder, "ckpt"), execution_provider="cpu", dtype="f32")
    path = package.save(str(tmp_path_factory.mktemp("audio") / "pkg"))
    return path, dict(np.load(os.path.join(folder, "audio.npz")))


def test_audio_prompt_matches_transformers(audio_package):
    path, ref = audio_package
    chain = Chain(path)
    features = chain.audio(ref["input_features"], ref["input_features_mask"])
    assert features.shape == ref["features"].shape, (features.shape, ref["features"].shape)
    assert np.abs(features - ref["features"]).max() <= TOLERANCE
    ids = ref["input_ids"]
    embeds = chain.embed(ids, np.zeros((0, chain.width), np.float32), features)
    logits, _ = chain.decode(ids, embeds, np.ones_like(ids), {})
    assert np.abs(logits - ref["logits"]).max() <= TOLERANCE
    silent = chain.embed(ids, np.zeros((0, chain.width), np.float32), 0 * features)
    moved = np.abs(chain.decode(ids, silent, np.ones_like(ids), {})[0] - ref["logits"]).max()
    assert moved > 1e-2  # the audio matters


def test_genai_audio_greedy_tokens_equal_transformers(audio_package):
    path, ref = audio_package
    model = og.Model(path)
    inputs = og.NamedTensors()
    inputs["input_ids"] = ref["input_ids"].astype(np.int32)
    inputs["audio_embeds"] = ref["input_features"]
    inputs["audio_attention_mask"] = ref["input_features_mask"]
    inputs["audio_sizes"] = np.array([len(ref["features"])], np.int64)
    expected = [int(t) for t in ref["tokens"][0]]
    tokens = vlm_runs.genai_greedy(model, inputs, ref["input_ids"].shape[1], len(expected))
    assert tokens == expected
    assert len(set(expected)) > 1, "degenerate continuation: the comparison would prove little"


#: genai's log-mel against transformers' (float32 FFT vs numpy's float64)
LOG_MEL_TOLERANCE = 1e-5


@pytest.mark.parametrize("mel", vl_cases.MEL_SIZES)
def test_genai_log_mel_equals_transformers(mel, audio_package, tmp_path):
    path, _ = audio_package
    folder = case_dir(vl_cases, vl_cases.AUDIO)
    ref = np.load(os.path.join(folder, "log_mel.npz"))
    work = processor_package(path, tmp_path / "pkg",
                             {SPEECH_PROCESSOR_FILE: speech_processor(mel)})
    processor = og.Model(work).create_multimodal_processor()
    out = processor("<|audio|>", audios=og.Audios.open(os.path.join(folder, "audio.wav")))
    features = out["audio_embeds"].as_numpy()[0]
    mask = out["audio_attention_mask"].as_numpy()[0]
    expected, real = ref[f"mel{mel}"], ref[f"mask{mel}"]
    assert features.shape[1] == mel and mask.all(), (features.shape, mask.sum())
    assert len(features) == int(real.sum()), (len(features), int(real.sum()))
    assert np.abs(features - expected[:len(features)]).max() <= LOG_MEL_TOLERANCE
    assert expected[real].std() > 0.5  # the tone and the quiet tail: varied features
