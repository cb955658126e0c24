"""docs/examples/llava_generate.py (plain onnxruntime, no genai) generates transformers'
greedy tokens from a tiny LLaVA package: text only, one image, two images."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from docs import examples_cases as cases
from docs.examples_cases import LLAVA_NEW_TOKENS as NEW_TOKENS
from docs.examples_cases import llava_prompt
from mobius.builder import build
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))


def _example():
    spec = importlib.util.spec_from_file_location(
        "llava_generate", os.path.join(HERE, "llava_generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(package, transformers' recorded runs: examples_cases._llava_generate)."""
    recorded = case_dir(cases, "llava_generate__tiny-llava")
    folder = os.path.join(recorded, "ckpt")
    root = tmp_path_factory.mktemp("llava")
    package = build(folder, execution_provider="cpu", dtype="f32").save(str(root / "pkg"))
    with open(os.path.join(recorded, "expected.json")) as f:
        return package, json.load(f)


@pytest.mark.parametrize("images", [0, 1, 2])
def test_generates_transformers_tokens(built, images):
    package, runs = built
    example = _example()
    facts = runs["facts"]
    pixels, prompt = llava_prompt(facts, images)
    llava = example.LlavaPackage(package)
    if images:
        per_image = llava.tokens_per_image(pixels)
        assert per_image == (facts["image_size"] // facts["patch_size"]) ** 2
        prompt = example.expand_image_tokens(prompt, llava.image_token_id, per_image)
    assert prompt == runs[str(images)]["input_ids"]  # transformers' prompt
    input_ids = np.array([prompt], np.int64)
    expected = runs[str(images)]["tokens"]
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
