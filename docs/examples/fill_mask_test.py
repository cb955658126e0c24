"""docs/examples/fill_mask.py gives transformers' fill-mask pipeline answer (top tokens
and scores) on a tiny masked-LM checkpoint whose tokenizer has a mask token."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import transformers

import mobius
from mobius.models.masked_lm import FAMILIES
from testing.model_runs import make_family_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
MASK = "<mask>"
TEXTS = [f"The quick brown {MASK} jumps over the lazy dog.", f"ONNX {MASK} runs models."]


def _example():
    sys.path.insert(0, HERE)  # as `python docs/examples/fill_mask.py` has it
    try:
        spec = importlib.util.spec_from_file_location("fill_mask",
                                                      os.path.join(HERE, "fill_mask.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(HERE)


def _add_mask_token(folder: str) -> None:
    """The tiny tokenizer has no mask token: add one, as a masked LM's tokenizer has."""
    from tokenizers import Tokenizer

    path = os.path.join(folder, "tokenizer.json")
    tokenizer = Tokenizer.from_file(path)
    tokenizer.add_special_tokens([MASK])
    tokenizer.save(path)
    config_path = os.path.join(folder, "tokenizer_config.json")
    with open(config_path) as f:
        config = json.load(f)
    with open(config_path, "w") as f:
        json.dump({**config, "mask_token": MASK}, f)


@pytest.fixture(scope="module", params=[FAMILIES[0], FAMILIES[1]], ids=lambda f: f.name)
def package(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param.name)
    folder = make_family_checkpoint(str(root / "ckpt"), request.param)
    _add_mask_token(folder)
    return folder, mobius.build(folder).save(str(root / "pkg"))


def test_same_top_tokens_and_scores_as_the_pipeline(package):
    folder, pkg = package
    results = _example().fill(pkg, TEXTS, top=5)
    pipe = transformers.pipeline("fill-mask", model=folder, device="cpu", top_k=5)
    for text, (candidates,) in zip(TEXTS, results):
        expected = pipe(text)
        assert [i for i, _, _ in candidates] == [e["token"] for e in expected]
        np.testing.assert_allclose([s for _, _, s in candidates], [e["score"] for e in expected],
                                   atol=1e-5)


def test_command_line(package):
    _, pkg = package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, os.path.join(HERE, "fill_mask.py"), pkg, *TEXTS],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(TEXTS)
