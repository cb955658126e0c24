"""The package docs/examples/speech_recognition.py reads loads as transformers' own
processor (AutoProcessor.from_pretrained on the package folder), whose normalization and
CTC decoding the example's agree with. It runs transformers on the package built here,
so it imports transformers: a target of its own keeps examples_test free of it."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import transformers

import mobius
from docs import examples_cases as cases
from docs.examples_cases import RATE, waveforms
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))


def _example():
    spec = importlib.util.spec_from_file_location(
        "speech_recognition", os.path.join(HERE, "speech_recognition.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("preset", ["tiny-hubert", "tiny-wav2vec2"])
def test_package_loads_as_the_transformers_processor(preset, tmp_path):
    folder = os.path.join(case_dir(cases, f"speech_recognition__{preset}"), "ckpt")
    pkg = mobius.build(folder).save(str(tmp_path / "pkg"))
    processor = transformers.AutoProcessor.from_pretrained(pkg)
    transcriber = _example().Transcriber(pkg)
    waveform = waveforms()[1]
    values = processor(waveform, sampling_rate=RATE, return_tensors="np")["input_values"][0]
    np.testing.assert_allclose(transcriber.normalize(waveform), values, atol=1e-5)
    ids = transcriber.logits(waveform).argmax(-1)
    assert processor.decode(ids) == transcriber.transcribe(waveform)
