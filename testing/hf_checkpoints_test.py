"""Tiny transformers checkpoints randomize every parameter: no tensor is left at the
constant transformers initializes it to (zero biases, unit norm scales). Under Bazel the
seed-0 checkpoints make_hf_checkpoint wrote at build time (//testing/tiny:hf) are read."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from testing.hf_checkpoints import seed0_checkpoint


@pytest.mark.parametrize("preset", ["tiny-gpt2", "tiny-bert-seq-cls", "tiny-llama",
                                    "tiny-whisper", "tiny-hubert"])
def test_no_tensor_is_constant(preset, tmp_path):
    from safetensors.numpy import load_file

    folder = seed0_checkpoint(str(tmp_path / "ckpt"), preset)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    biases = [n for n in tensors if n.endswith(".bias")]
    assert biases or preset == "tiny-llama"
    constant = [n for n, t in tensors.items() if t.size > 1 and np.all(t == t.reshape(-1)[0])]
    assert constant == []
    scales = [t for n, t in tensors.items()
              if re.search(r"(norm|ln_)\w*\.weight$", n, re.IGNORECASE)]  # GPT-2: ln_1, ln_f
    assert scales and all(0.5 < float(t.mean()) < 1.5 for t in scales)  # around 1
