"""docs/examples/speech_recognition.py gives transformers' automatic-speech-recognition
pipeline's text on tiny wav2vec2 (group norm, no mask) and HuBERT (layer norm, mask)
CTC checkpoints. (That the package's processor files load as transformers' processor:
speech_processor_test.py, which imports transformers.)"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import wave

import numpy as np
import pytest

import mobius
from docs import examples_cases as cases
from docs.examples_cases import RATE, waveforms
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = ["tiny-hubert", "tiny-wav2vec2"]


def _example():
    spec = importlib.util.spec_from_file_location(
        "speech_recognition", os.path.join(HERE, "speech_recognition.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """preset -> (the pipeline's recorded texts, package): examples_cases."""
    made = {}
    for preset in PRESETS:
        recorded = case_dir(cases, f"speech_recognition__{preset}")
        with open(os.path.join(recorded, "expected.json")) as f:
            texts = json.load(f)
        root = tmp_path_factory.mktemp(preset)
        package = mobius.build(os.path.join(recorded, "ckpt")).save(str(root / "pkg"))
        made[preset] = (texts, package)
    return made


@pytest.mark.parametrize("preset", PRESETS)
def test_same_text_as_the_pipeline(preset, packages):
    expected, pkg = packages[preset]
    transcriber = _example().Transcriber(pkg)
    texts = [transcriber.transcribe(w) for w in waveforms()]
    assert texts == expected
    assert all(texts) and len(set(texts)) == len(texts), texts  # the decoding has work to do


def test_command_line(packages, tmp_path):
    texts, pkg = packages["tiny-hubert"]
    paths = []
    for i, waveform in enumerate(waveforms()):
        paths.append(str(tmp_path / f"clip{i}.wav"))
        with wave.open(paths[-1], "wb") as f:
            f.setnchannels(1), f.setsampwidth(2), f.setframerate(RATE)
            f.writeframes(np.round(waveform * 32768).astype(np.int16).tobytes())
    result = subprocess.run([sys.executable, os.path.join(HERE, "speech_recognition.py"), pkg,
                             *paths], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = [f"{p}: {text}" for p, text in zip(paths, texts, strict=True)]
    assert result.stdout.splitlines() == expected
