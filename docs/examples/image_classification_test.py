"""docs/examples/image_classification.py gives transformers' image-classification
pipeline answers (labels, scores) on tiny image-classifier checkpoints, with the image
processor the package carries."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import mobius
from docs import examples_cases as cases
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))


def _example():
    spec = importlib.util.spec_from_file_location(
        "image_classification", os.path.join(HERE, "image_classification.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _recorded(preset: str):
    """(checkpoint, its made-up images, transformers' pipeline answers) of examples_cases:
    two images of different sizes and aspect ratios (resize and crop matter)."""
    return cases.recorded_images(case_dir(cases, f"image_classification__{preset}"))


#: one processor of each kind: resize to a square (ViT), shortest edge + centre crop (DINOv2)
@pytest.mark.parametrize("preset", ["tiny-vit-img-cls", "tiny-dinov2-img-cls"])
def test_same_labels_and_scores_as_the_pipeline(preset, tmp_path):
    folder, paths, answers = _recorded(preset)
    pkg = mobius.build(folder).save(str(tmp_path / "pkg"))
    probabilities, labels = _example().classify(pkg, paths)
    for row, expected in zip(probabilities, answers, strict=True):
        assert len(expected) == len(labels)  # the pipeline ranked every label
        got = [labels[int(i)] for i in np.argsort(-row)]
        assert got[:3] == [e["label"] for e in expected[:3]]
        np.testing.assert_allclose(np.sort(row)[::-1], [e["score"] for e in expected],
                                   atol=1e-5)


def test_command_line(tmp_path):
    folder, paths, _ = _recorded("tiny-vit-img-cls")
    pkg = mobius.build(folder).save(str(tmp_path / "pkg"))
    result = subprocess.run([sys.executable, os.path.join(HERE, "image_classification.py"), pkg,
                             *paths], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(paths) and all(line.count("(") == 3 for line in lines)
