"""docs/examples/text2text.py generates the same tokens as transformers' greedy
``generate`` on tiny t5, mt5, bart and marian checkpoints (a padded batch of sources), and runs
from the command line."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import torch
import transformers

import mobius
from mobius.models import bart, marian, t5
from testing.hf_checkpoints import untie_t5_head
from testing.model_runs import make_family_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = ["translate English to German: The quick brown fox jumps over the lazy dog.",
         "summarize: ONNX Runtime runs models.", "Once upon a time"]  # padded batch
NEW_TOKENS = 12
BY_NAME = {f.name: f for f in (*t5.FAMILIES, bart.FAMILY, marian.FAMILY)}


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


def _package(tmp_path, family_name, untie_t5=False, **overrides):
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), BY_NAME[family_name], **overrides)
    if untie_t5:  # a tied, unscaled mT5 head repeats the start token: untie it, as mT5 is
        untie_t5_head(folder)
    return folder, mobius.build(folder).save(str(tmp_path / "pkg"))


# untied heads where a tied one would echo the start token (mT5, BART)
@pytest.mark.parametrize("family,untie_t5,overrides", [
    ("t5", False, {}), ("mt5", True, {}), ("bart", False, {"tie_word_embeddings": False}),
    ("marian", False, {"tie_word_embeddings": False})])
def test_same_tokens_as_transformers_generate(family, untie_t5, overrides, tmp_path):
    folder, pkg = _package(tmp_path, family, untie_t5, **overrides)
    got = _example().generate(pkg, TEXTS, max_new_tokens=NEW_TOKENS)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, dtype=torch.float32).eval()
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    assert not batch["attention_mask"].all()  # the batch is padded
    with torch.no_grad():
        expected = model.generate(**batch, do_sample=False, num_beams=1,
                                  max_new_tokens=NEW_TOKENS).numpy()
    np.testing.assert_array_equal(got, expected)
    assert len(set(got[:, 1:].ravel().tolist())) > 1  # not one token repeated


def test_command_line(tmp_path):
    _, pkg = _package(tmp_path, "t5")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, os.path.join(HERE, "text2text.py"), pkg, *TEXTS],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(TEXTS) and all(" -> " in line for line in lines)
