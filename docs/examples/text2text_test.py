"""docs/examples/text2text.py generates the same tokens as transformers' greedy
``generate`` on tiny t5, mt5, bart and marian checkpoints (a padded batch of sources), and runs
from the command line."""

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
from docs.examples_cases import T2T_NEW_TOKENS as NEW_TOKENS
from docs.examples_cases import T2T_TEXTS as TEXTS
from testing.reference_cases import case_dir

HERE = os.path.dirname(os.path.abspath(__file__))


def _example():
    sys.path.insert(0, HERE)  # as `python docs/examples/text2text.py` has it
    try:
        spec = importlib.util.spec_from_file_location("text2text",
                                                      os.path.join(HERE, "text2text.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(HERE)


def _package(tmp_path, case: str):
    """(transformers' recorded generate, the package of the case's checkpoint): examples_cases
    (untied heads where a tied one would echo the start token: mT5, BART, Marian)."""
    recorded = case_dir(cases, f"text2text__{case}")
    with open(os.path.join(recorded, "expected.json")) as f:
        expected = json.load(f)
    return expected, mobius.build(os.path.join(recorded, "ckpt")).save(str(tmp_path / "pkg"))


@pytest.mark.parametrize("case", ["t5", "mt5", "bart", "marian"])
def test_same_tokens_as_transformers_generate(case, tmp_path):
    expected, pkg = _package(tmp_path, case)
    got = _example().generate(pkg, TEXTS, max_new_tokens=NEW_TOKENS)
    assert expected["padded"]  # the batch is padded
    np.testing.assert_array_equal(got, np.array(expected["tokens"]))
    assert len(set(got[:, 1:].ravel().tolist())) > 1  # not one token repeated


def test_command_line(tmp_path):
    _, pkg = _package(tmp_path, "t5")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, os.path.join(HERE, "text2text.py"), pkg, *TEXTS],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(TEXTS) and all(" -> " in line for line in lines)
