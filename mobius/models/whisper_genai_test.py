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
"""

from __future__ import annotations

import wave

import numpy as np
import pytest

import onnxruntime_genai as og
import torch
import transformers

import mobius
from mobius.tiny.presets import TINY_PRESETS
from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint

PRESET = TINY_PRESETS["tiny-whisper"]
GENAI_FRAMES = 3000
OVERRIDES = {"max_source_positions": GENAI_FRAMES // 2, "init_std": 0.2}
MELS = PRESET["num_mel_bins"]
START = PRESET["decoder_start_token_id"]
PROMPTS = [[START, 5, 7, 9], [START, 11, 13, 17]]
MAX_LENGTH = 24  # prompt + 20 new tokens, within max_target_positions (40)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("whisper") / "ckpt")
    make_hf_checkpoint(folder, "tiny-whisper", **OVERRIDES)
    return folder, load_hf_model(folder)


@pytest.fixture(scope="module")
def packages(checkpoint, tmp_path_factory):
    folder, _ = checkpoint
    root = tmp_path_factory.mktemp("packages")
    return {ep: mobius.build(folder, execution_provider=ep).save(str(root / ep))
            for ep in ("default", "cpu")}


def _features(batch: int, frames: int = GENAI_FRAMES, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, MELS, frames)).astype(np.float32)


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


def hf_generate(model, features: np.ndarray, prompts) -> list[list[int]]:
    new = MAX_LENGTH - len(prompts[0])
    with torch.no_grad():
        out = model.generate(input_features=torch.from_numpy(features),
                             decoder_input_ids=torch.tensor(prompts), max_new_tokens=new,
                             min_new_tokens=new, do_sample=False)
    rows = out.tolist()
    # WhisperForConditionalGeneration.generate returns the new tokens only (short form);
    # strip the prompt should a version return it.
    return [row[len(p):] if row[:len(p)] == list(p) else row for row, p in zip(rows, prompts)]


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_generation_matches_transformers(checkpoint, packages, ep, batch):
    _, hf_model = checkpoint
    features, prompts = _features(batch), PROMPTS[:batch]
    expected = hf_generate(hf_model, features, prompts)
    got = genai_generate(packages[ep], features, prompts)
    assert all(len(row) == MAX_LENGTH - len(PROMPTS[0]) for row in expected)
    assert got == expected
    assert any(len(set(row)) > 3 for row in expected), "degenerate continuation"


def test_batch_rows_match_single_runs(packages):
    features = _features(2)
    batched = genai_generate(packages["cpu"], features, PROMPTS)
    single = [genai_generate(packages["cpu"], features[i:i + 1], PROMPTS[i:i + 1])[0]
              for i in range(2)]
    assert batched == single


def test_genai_requires_3000_frames(tmp_path):
    """Why the e2e checkpoint has 1500 encoder positions: genai 0.18 rejects any other
    frame count, although the graph itself takes the checkpoint's (the preset's 60)."""
    folder = make_hf_checkpoint(str(tmp_path / "ckpt"), "tiny-whisper")
    package = mobius.build(folder).save(str(tmp_path / "pkg"))
    frames = 2 * PRESET["max_source_positions"]
    with pytest.raises(RuntimeError, match=f"Whisper uses num_frames = 3000. The provided "
                                           f"inputs have num_frames = {frames}"):
        genai_generate(package, _features(1, frames), PROMPTS[:1])


def test_audio_processor_matches_transformers_feature_extractor(packages, tmp_path):
    rate, seconds = 16000, 2
    t = np.arange(rate * seconds) / rate
    rng = np.random.default_rng(0)
    signal = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(t.shape)
    pcm = (np.clip(signal, -1, 1) * 32767).astype(np.int16)
    path = str(tmp_path / "clip.wav")
    with wave.open(path, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())

    processor = og.Model(packages["cpu"]).create_multimodal_processor()
    got = processor("a", audios=og.Audios.open(path))["audio_features"].as_numpy()
    expected = transformers.WhisperFeatureExtractor(feature_size=MELS)(
        pcm.astype(np.float32) / 32768.0, sampling_rate=rate, return_tensors="np").input_features
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
