"""docs/examples/zero_shot_image_classification.py gives transformers'
zero-shot-image-classification pipeline answers (label order and scores) on the tiny
CLIP and SigLIP checkpoints, for the default and the cpu EP's (fused) package."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import transformers
from PIL import Image

import mobius
from mobius.models.registry import FAMILIES
from mobius.tiny.presets import TINY_PRESETS
from testing.model_runs import make_family_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
BY_NAME = {f.name: f for f in FAMILIES if f.task.name == "zero-shot-image-classification"}
#: label prompts of different lengths (CLIP's batch is padded); the tiny CLIP has 24
#: positions and a small tokenizer, so the prompts are short. SigLIP's are padded to 64 (the
#: pipeline's length, the example's default): its tiny text tower gets 64 positions. The
#: tiny CLIP's eos_token_id is outside its vocabulary, so transformers pools its text
#: tower at position 0: the label comes first, or every prompt would score the same.
LABELS = ["cat", "red car", "dog", "tree"]
TEMPLATE = "{} photo"
OVERRIDES = {"siglip": {"text_config": {**TINY_PRESETS["tiny-siglip"]["text_config"],
                                        "max_position_embeddings": 64}}}


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


def _checkpoint(tmp_path, family: str) -> str:
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), BY_NAME[family],
                                    **OVERRIDES.get(family, {}))
    if family == "siglip":  # as SigLIP's own tokenizer: no attention_mask (the model reads none)
        path = os.path.join(folder, "tokenizer_config.json")
        with open(path) as f:
            config = json.load(f)
        with open(path, "w") as f:
            json.dump({**config, "model_input_names": ["input_ids"]}, f)
    return folder


def _images(folder) -> list[str]:
    """Two made-up images of different sizes (resize and crop matter)."""
    rng = np.random.default_rng(1)
    paths = []
    for i, (height, width) in enumerate([(50, 64), (72, 40)]):
        ramp = np.linspace(0, 255, height)[:, None, None] * np.ones((1, width, 3))
        pixels = np.clip(ramp + rng.integers(0, 90, (height, width, 3)), 0, 255)
        path = os.path.join(folder, f"image{i}.png")
        Image.fromarray(pixels.astype(np.uint8)).save(path)
        paths.append(path)
    return paths


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("family", sorted(BY_NAME))
def test_same_labels_and_scores_as_the_pipeline(family, ep, tmp_path):
    folder = _checkpoint(tmp_path, family)
    pkg = mobius.build(folder, execution_provider=ep).save(str(tmp_path / "pkg"))
    paths = _images(str(tmp_path))
    scores = _example().classify(pkg, paths, LABELS, TEMPLATE)
    pipe = transformers.pipeline("zero-shot-image-classification", model=folder, device="cpu")
    for row, path in zip(scores, paths):
        expected = pipe(path, candidate_labels=LABELS, hypothesis_template=TEMPLATE)
        got = [LABELS[i] for i in np.argsort(-row)]
        assert got == [e["label"] for e in expected]
        np.testing.assert_allclose(np.sort(row)[::-1], [e["score"] for e in expected],
                                   atol=1e-5)
    assert np.ptp(scores) > 1e-3  # the labels really score differently


def test_command_line(tmp_path):
    folder = _checkpoint(tmp_path, "clip")
    pkg = mobius.build(folder).save(str(tmp_path / "pkg"))
    paths = _images(str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, os.path.join(HERE, "zero_shot_image_classification.py"), pkg, *paths,
         "--labels", *LABELS, "--template", TEMPLATE], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(paths) and all(line.count("(") == len(LABELS) for line in lines)
