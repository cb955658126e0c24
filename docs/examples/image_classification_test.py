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

import transformers
from PIL import Image

import mobius
from mobius.models.registry import FAMILIES
from testing.model_runs import make_family_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSIFIERS = {f.name: f for f in FAMILIES if f.task.name == "image-classification"}


def _example():
    spec = importlib.util.spec_from_file_location(
        "image_classification", os.path.join(HERE, "image_classification.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _images(folder) -> list[str]:
    """Two made-up images of different sizes and aspect ratios (resize and crop matter)."""
    rng = np.random.default_rng(0)
    paths = []
    for i, (height, width) in enumerate([(45, 60), (70, 38)]):
        ramp = np.linspace(0, 255, width)[None, :, None] * np.ones((height, 1, 3))
        noise = rng.integers(0, 80, size=(height, width, 3))
        pixels = np.clip(ramp + noise, 0, 255).astype(np.uint8)
        path = os.path.join(folder, f"image{i}.png")
        Image.fromarray(pixels).save(path)
        paths.append(path)
    return paths


#: one processor of each kind: resize to a square (ViT), shortest edge + centre crop (DINOv2)
@pytest.mark.parametrize("family", ["vit-img-cls", "dinov2-img-cls"])
def test_same_labels_and_scores_as_the_pipeline(family, tmp_path):
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), CLASSIFIERS[family])
    pkg = mobius.build(folder).save(str(tmp_path / "pkg"))
    paths = _images(str(tmp_path))
    probabilities, labels = _example().classify(pkg, paths)
    pipe = transformers.pipeline("image-classification", model=folder, device="cpu")
    for row, expected in zip(probabilities, pipe(paths, top_k=len(labels))):
        got = [labels[int(i)] for i in np.argsort(-row)]
        assert got[:3] == [e["label"] for e in expected[:3]]
        np.testing.assert_allclose(np.sort(row)[::-1], [e["score"] for e in expected],
                                   atol=1e-5)


def test_command_line(tmp_path):
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), CLASSIFIERS["vit-img-cls"])
    pkg = mobius.build(folder).save(str(tmp_path / "pkg"))
    paths = _images(str(tmp_path))
    result = subprocess.run([sys.executable, os.path.join(HERE, "image_classification.py"), pkg,
                             *paths], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(paths) and all(line.count("(") == 3 for line in lines)
