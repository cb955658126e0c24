"""docs/examples/speech_recognition.py gives transformers' automatic-speech-recognition
pipeline's text on tiny wav2vec2 (group norm, no mask) and HuBERT (layer norm, mask)
CTC checkpoints, and the package's processor files load as transformers' processor."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import wave

import numpy as np
import pytest

import transformers

import mobius
from mobius.models import wav2vec2
from testing.model_runs import make_family_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
FAMILIES = {"wav2vec2": wav2vec2.FAMILY, "hubert": wav2vec2.HUBERT}
RATE = 16000


def _example():
    spec = importlib.util.spec_from_file_location(
        "speech_recognition", os.path.join(HERE, "speech_recognition.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _waveforms(seed: int = 0) -> list[np.ndarray]:
    """Tones with noise, of different lengths (0.1 - 0.2 s), in [-1, 1)."""
    rng = np.random.default_rng(seed)
    out = []
    for samples, pitch in ((1600, 220.0), (2400, 440.0), (3200, 330.0)):
        t = np.arange(samples) / RATE
        wave_ = 0.4 * np.sin(2 * np.pi * pitch * t) + 0.1 * rng.standard_normal(samples)
        out.append(np.round(wave_ * 32767) / 32768)  # exactly what a 16-bit WAV holds
    return [w.astype(np.float32) for w in out]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    made = {}
    for name, family in FAMILIES.items():
        root = tmp_path_factory.mktemp(name)
        folder = make_family_checkpoint(str(root / "ckpt"), family)
        made[name] = (folder, mobius.build(folder).save(str(root / "pkg")))
    return made


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_same_text_as_the_pipeline(name, packages):
    folder, pkg = packages[name]
    transcriber = _example().Transcriber(pkg)
    pipe = transformers.pipeline("automatic-speech-recognition", model=folder, device="cpu")
    texts = [transcriber.transcribe(w) for w in _waveforms()]
    assert texts == [pipe(w.copy())["text"] for w in _waveforms()]
    assert all(texts) and len(set(texts)) == len(texts), texts  # the decoding has work to do


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_package_loads_as_the_transformers_processor(name, packages):
    _, pkg = packages[name]
    processor = transformers.AutoProcessor.from_pretrained(pkg)
    transcriber = _example().Transcriber(pkg)
    waveform = _waveforms()[1]
    values = processor(waveform, sampling_rate=RATE, return_tensors="np")["input_values"][0]
    np.testing.assert_allclose(transcriber.normalize(waveform), values, atol=1e-5)
    ids = transcriber.logits(waveform).argmax(-1)
    assert processor.decode(ids) == transcriber.transcribe(waveform)


def test_command_line(packages, tmp_path):
    folder, pkg = packages["hubert"]
    paths = []
    for i, waveform in enumerate(_waveforms()):
        paths.append(str(tmp_path / f"clip{i}.wav"))
        with wave.open(paths[-1], "wb") as f:
            f.setnchannels(1), f.setsampwidth(2), f.setframerate(RATE)
            f.writeframes(np.round(waveform * 32768).astype(np.int16).tobytes())
    result = subprocess.run([sys.executable, os.path.join(HERE, "speech_recognition.py"), pkg,
                             *paths], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    pipe = transformers.pipeline("automatic-speech-recognition", model=folder, device="cpu")
    expected = [f"{p}: {pipe(w.copy())['text']}" for p, w in zip(paths, _waveforms())]
    assert result.stdout.splitlines() == expected
