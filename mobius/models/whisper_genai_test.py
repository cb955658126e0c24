"""L4: onnxruntime-genai (0.18) runs the two-model Whisper package and greedy-generates
what transformers' ``WhisperForConditionalGeneration.generate`` does, token for token.

Checkpoint: transformers' own (testing/hf_checkpoints.py), the tiny-whisper preset
with ``max_source_positions`` 1500 instead of 30, because genai 0.18's whisper
pipeline only accepts 3000 mel frames: its AudioEncoderState checks the
``audio_features`` input and throws ``Whisper uses num_frames = 3000. The provided
inputs have num_frames = 60`` for the preset's 60 frames
(:func:`test_genai_requires_3000_frames` pins that behaviour, so the override can
go when genai lifts it). Whisper itself needs frames == 2 * max_source_positions,
so the position table grows to 1500 rows; every other dimension stays tiny.
``init_std`` 0.2 (transformers' default 0.02 makes the tiny decoder repeat one
token) gives varied continuations.

Driven as genai's whisper API expects: the log-mel features through
``generator.set_model_input("audio_features", mel)``, the decoder prompt
(decoder_start_token_id + 3 tokens) through ``append_tokens``; transformers gets
the same features and ``decoder_input_ids``. EOS is suppressed on both sides
(genai ``min_length == max_length``, transformers ``min_new_tokens``). Batches of
one and two utterances, packages built for the default and cpu EPs.

Also the package's audio_processor_config.json: genai's audio processor turns a
wav file into audio_features equal to transformers' WhisperFeatureExtractor,
except in the frames whose 400-sample STFT window crosses the start or the end
of the clip (genai pads the clip differently there).

transformers' side (checkpoints, generations, features) is recorded at build time:
whisper_genai_cases.py.
"""

from __future__ import annotations

import json
import os
import wave

import numpy as np
import pytest

import onnxruntime_genai as og

import mobius
from mobius.models import whisper_genai_cases as cases
from mobius.models.whisper_genai_cases import (GENAI_FRAMES, MAX_LENGTH, MELS, PRESET, PROMPTS,
                                               RATE, clip_pcm, mel_features)
from testing.reference_cases import case_dir


@pytest.fixture(scope="module")
def expected_rows():
    """transformers' greedy rows per batch size (whisper_genai_cases.py)."""
    with open(os.path.join(case_dir(cases, "e2e"), "transformers.json")) as f:
        return {int(batch): rows for batch, rows in json.load(f).items()}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    folder = os.path.join(case_dir(cases, "e2e"), "ckpt")
    root = tmp_path_factory.mktemp("packages")
    return {ep: mobius.build(folder, execution_provider=ep).save(str(root / ep))
            for ep in ("default", "cpu")}


def genai_generate(package: str, features: np.ndarray, prompts) -> list[list[int]]:
    """Greedy tokens after the prompt, per row."""
    model = og.Model(package)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=MAX_LENGTH, min_length=MAX_LENGTH, do_sample=False,
                              batch_size=len(prompts))
    generator = og.Generator(model, params)
    generator.set_model_input("audio_features", features)
    generator.append_tokens(np.array(prompts, dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    return [[int(t) for t in generator.get_sequence(i)[len(prompts[i]):]]
            for i in range(len(prompts))]


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_generation_matches_transformers(expected_rows, packages, ep, batch):
    features, prompts = mel_features(batch), PROMPTS[:batch]
    expected = expected_rows[batch]
    got = genai_generate(packages[ep], features, prompts)
    assert all(len(row) == MAX_LENGTH - len(PROMPTS[0]) for row in expected)
    assert got == expected
    assert any(len(set(row)) > 3 for row in expected), "degenerate continuation"


def test_batch_rows_match_single_runs(packages):
    features = mel_features(2)
    batched = genai_generate(packages["cpu"], features, PROMPTS)
    single = [genai_generate(packages["cpu"], features[i:i + 1], PROMPTS[i:i + 1])[0]
              for i in range(2)]
    assert batched == single


def test_genai_requires_3000_frames(tmp_path):
    """Why the e2e checkpoint has 1500 encoder positions: genai 0.18 rejects any other
    frame count, although the graph itself takes the checkpoint's (the preset's 60)."""
    folder = os.path.join(case_dir(cases, "preset"), "ckpt")
    package = mobius.build(folder).save(str(tmp_path / "pkg"))
    frames = 2 * PRESET["max_source_positions"]
    with pytest.raises(RuntimeError, match=f"Whisper uses num_frames = 3000. The provided "
                                           f"inputs have num_frames = {frames}"):
        genai_generate(package, mel_features(1, frames), PROMPTS[:1])


def test_audio_processor_matches_transformers_feature_extractor(packages, tmp_path):
    rate, pcm = RATE, clip_pcm()
    path = str(tmp_path / "clip.wav")
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())

    processor = og.Model(packages["cpu"]).create_multimodal_processor()
    got = processor("a", audios=og.Audios.open(path))["audio_features"].as_numpy()
    expected = np.load(os.path.join(case_dir(cases, "clip"), "features.npy"))
    assert got.shape == expected.shape == (1, MELS, GENAI_FRAMES)
    assert np.isfinite(got).all()
    # frame f's window covers samples [160 f - 200, 160 f + 200): skip those crossing 0 or the end
    hop, half = 160, 200
    end = len(pcm)
    frames = np.arange(GENAI_FRAMES)
    edge = ((frames * hop - half < 0) |
            ((frames * hop - half < end) & (frames * hop + half > end)))
    assert edge.sum() == 5
    np.testing.assert_allclose(got[..., ~edge], expected[..., ~edge], atol=1e-4, rtol=0)
