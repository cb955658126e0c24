"""docs/examples/llava_generate.py (plain onnxruntime, no genai) generates transformers'
greedy tokens from a tiny LLaVA package: text only, one image, two images."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from mobius.builder import build
from testing.hf_checkpoints import load_hf_model
from testing.llava_checkpoints import hf_llava_generate, make_llava_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
NEW_TOKENS = 8


def _example():
    spec = importlib.util.spec_from_file_location(
        "llava_generate", os.path.join(HERE, "llava_generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("llava")
    folder = make_llava_checkpoint(str(root / "ckpt"))
    package = build(folder, execution_provider="cpu", dtype="f32").save(str(root / "pkg"))
    return package, load_hf_model(folder)


@pytest.mark.parametrize("images", [0, 1, 2])
def test_generates_transformers_tokens(built, images):
    package, hf_model = built
    example = _example()
    config, rng = hf_model.config, np.random.default_rng(images)
    vision = config.vision_config
    pixels = rng.standard_normal((images, vision.num_channels, vision.image_size,
                                  vision.image_size)).astype(np.float32) if images else None
    prompt = [int(t) for t in rng.integers(4, config.image_token_index, size=3)]
    for _ in range(images):  # one <image> per image, then text
        prompt += [config.image_token_index] + [int(t) for t in rng.integers(4, 900, size=2)]
    llava = example.LlavaPackage(package)
    if images:
        per_image = llava.tokens_per_image(pixels)
        assert per_image == (vision.image_size // vision.patch_size) ** 2
        prompt = example.expand_image_tokens(prompt, llava.image_token_id, per_image)
    input_ids = np.array([prompt], np.int64)
    expected = hf_llava_generate(hf_model, input_ids, pixels, NEW_TOKENS)
    assert example.generate(llava, input_ids, pixels, NEW_TOKENS) == expected


def test_command_line(built, tmp_path):
    package, _ = built
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, os.path.join(HERE, "llava_generate.py"), package,
                             "Describe the picture", "--max-new-tokens", "4"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    from tokenizers import Tokenizer
    tokenizer = Tokenizer.from_file(os.path.join(package, "tokenizer.json"))
    ids = np.array([tokenizer.encode("Describe the picture").ids], np.int64)
    expected = tokenizer.decode(_example().generate(package, ids, None, 4, eos_token_id=2))
    assert result.stdout.strip() == expected.strip()
