"""Sliding-window KV cache: onnxruntime-genai generates past the window with a
window-sized buffer for the sliding layers, and still gives transformers' tokens.

Families: Mistral (every layer sliding, window 8), Gemma 2 (sliding + full,
window 6) and Cohere2 (two sliding + one full, window 4). The prompt (11
tokens) plus 20 generated tokens run well past each window. Batch 1: the
windowed cache evicts by cache slot, and genai's right-padded batches keep a
padding gap in the cache (docs/clients/python-genai.md).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime_genai as og
import pytest

import mobius
from mobius.cli import main
from mobius.package import sliding_window_cases as cases
from mobius.package.sliding_window_cases import NEW_TOKENS, PLAIN, PRESETS, PROMPT
from testing import genai_harness as harness
from testing.reference_cases import case_dir

CPU_SLACK = 16  # onnxruntime's CPU default: positions kept beyond the window


@pytest.fixture(scope="module", params=PRESETS)
def checkpoint(request):
    """(checkpoint, window, sliding layers, layers, transformers' greedy tokens on PROMPT)."""
    folder = os.path.join(case_dir(cases, request.param), "ckpt")
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    sliding = [i for i, kind in enumerate(raw.get("layer_types") or [])
               if kind == "sliding_attention"] or list(range(raw["num_hidden_layers"]))
    with open(os.path.join(case_dir(cases, request.param), "transformers.json")) as f:
        tokens = json.load(f)["tokens"]
    return folder, raw["sliding_window"], sliding, raw["num_hidden_layers"], tokens


def _present_lengths(package: str, max_length: int, layers: int) -> list[int]:
    """Each layer's present.key sequence length after a prompt and two steps in genai."""
    model = og.Model(package)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=max_length, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(np.array([PROMPT], dtype=np.int32))
    generator.generate_next_token()
    return [generator.get_output(f"present.{i}.key").shape[2] for i in range(layers)]


def test_generation_past_the_window_matches_transformers(checkpoint, tmp_path):
    folder, window, sliding, layers, hf_tokens = checkpoint
    package = str(tmp_path / "pkg")
    assert main(["build", "--model", folder, package, "--ep", "cpu", "--sliding-window-cache",
                 "--quiet"]) == 0
    genai = harness.genai_config(package)
    assert genai["model"]["decoder"]["sliding_window"]["window_size"] == window
    assert genai["model"]["decoder"]["sliding_window"]["layers"] == sliding
    got = harness.genai_generate(package, [PROMPT], NEW_TOKENS)
    assert got == hf_tokens
    max_length = 200
    lengths = _present_lengths(package, max_length, layers)
    assert lengths == [window + CPU_SLACK if i in sliding else max_length
                       for i in range(layers)]


def test_off_switch_and_short_context_keep_full_buffers(checkpoint, tmp_path):
    folder, window, _, layers, _ = checkpoint
    off = str(tmp_path / "off")  # the default
    mobius.build(folder, execution_provider="cpu").save(off)
    assert "sliding_window" not in harness.genai_config(off)["model"]["decoder"]
    assert _present_lengths(off, 200, layers) == [200] * layers
    # A context no longer than the window saves nothing: left as it was.
    short = str(tmp_path / "short")
    mobius.build(folder, execution_provider="cpu", context_length=window,
                 sliding_window_cache=True).save(short)
    assert "sliding_window" not in harness.genai_config(short)["model"]["decoder"]


def test_eps_without_a_windowed_kernel_are_left_alone():
    folder = os.path.join(case_dir(cases, PLAIN), "ckpt")
    package = mobius.build(folder, execution_provider="default", sliding_window_cache=True)
    assert "sliding_window" not in package.genai_config["model"]["decoder"]
