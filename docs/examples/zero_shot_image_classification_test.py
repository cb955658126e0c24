"""docs/examples/zero_shot_image_classification.py gives transformers'
zero-shot-image-classification pipeline answers (label order and scores) on the tiny
CLIP and SigLIP checkpoints, for the default and the cpu EP's (fused) package."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import mobius
from docs import examples_cases as cases
from docs.examples_cases import LABELS, TEMPLATE
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))


def _example():
    sys.path.insert(0, HERE)  # as `python docs/examples/zero_shot_image_classification.py`
    try:
        spec = importlib.util.spec_from_file_location(
            "zero_shot_image_classification",
            os.path.join(HERE, "zero_shot_image_classification.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(HERE)


def _recorded(preset: str):
    """(checkpoint, two made-up images of different sizes, transformers' pipeline answers
    per image): examples_cases (SigLIP's tokenizer without attention_mask, as its own)."""
    return cases.recorded_images(case_dir(cases, f"zero_shot_image_classification__{preset}"))


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("preset", ["tiny-clip", "tiny-siglip"])
def test_same_labels_and_scores_as_the_pipeline(preset, ep, tmp_path):
    folder, paths, answers = _recorded(preset)
    pkg = mobius.build(folder, execution_provider=ep).save(str(tmp_path / "pkg"))
    scores = _example().classify(pkg, paths, LABELS, TEMPLATE)
    for row, expected in zip(scores, answers, strict=True):
        got = [LABELS[i] for i in np.argsort(-row)]
        assert got == [e["label"] for e in expected]
        np.testing.assert_allclose(np.sort(row)[::-1], [e["score"] for e in expected],
                                   atol=1e-5)
    assert np.ptp(scores) > 1e-3  # the labels really score differently


def test_command_line(tmp_path):
    folder, paths, _ = _recorded("tiny-clip")
    pkg = mobius.build(folder).save(str(tmp_path / "pkg"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, os.path.join(HERE, "zero_shot_image_classification.py"), pkg, *paths,
         "--labels", *LABELS, "--template", TEMPLATE], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(paths) and all(line.count("(") == len(LABELS) for line in lines)
