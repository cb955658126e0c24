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

import mobius
from docs import examples_cases as cases
from docs.examples_cases import FILL_MASK_TEXTS as TEXTS
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))


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


@pytest.fixture(scope="module", params=["tiny-bert-mlm", "tiny-roberta-mlm"])
def package(request, tmp_path_factory):
    """(transformers' pipeline answers, the package of the checkpoint with a mask token)."""
    recorded = case_dir(cases, f"fill_mask__{request.param}")
    folder = os.path.join(recorded, "ckpt")
    with open(os.path.join(recorded, "expected.json")) as f:
        expected = json.load(f)
    return expected, mobius.build(folder).save(str(tmp_path_factory.mktemp("pkg") / "pkg"))


def test_same_top_tokens_and_scores_as_the_pipeline(package):
    answers, pkg = package
    results = _example().fill(pkg, TEXTS, top=5)
    for expected, (candidates,) in zip(answers, results, strict=True):
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
