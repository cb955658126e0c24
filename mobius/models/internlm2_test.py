"""InternLM2: a hub checkpoint with auto_map code, built natively from config.json +
safetensors, L3 parity per switch and L4 genai greedy tokens.

* Reference: transformers has no InternLM2 class, so it is transformers'
  LlamaForCausalLM with the checkpoint's weights remapped as modeling_internlm2.py reads
  them (fused wqkv split per K/V group; internlm2_cases.py). The checkpoint itself is in
  the hub layout (original tensor names, auto_map in config.json), every tensor random.
* Parity: f32 logits within 1e-4 over a left-padded and an unpadded batch, prefill + 3
  cached greedy decode steps, on the default and cpu EPs. A graph whose
  GroupQueryAttention applies RoPE itself is compared left-padded over the prefill only
  (ORT's GQA takes decode-step rotary positions from cache slots: a known kernel
  limitation, see ep/parity_suite.py); its unpadded run covers every step.
* Switches: each reverted switch on the same weights moves the logits or needs /
  leaves tensors the checkpoint lacks / holds.
* genai: onnxruntime-genai (model.type "internlm2") greedy-generates transformers'
  tokens from the reference on both packages.
"""

from __future__ import annotations

import json
import os

import pytest

import mobius
from mobius.models import internlm2_cases as cases
from mobius.models.internlm2_cases import CONFIGS, NEW_TOKENS, PRESET, PROMPTS
from mobius.tiny.presets import TINY_PRESETS
from testing import genai_harness as harness
from testing.checkpoint_runs import checkpoint, reference
from testing.reference_cases import case_dir
from testing.switch_checks import (assert_rejected_up_front, assert_revert_moves_logits,
                                   f32_recorded_run_parity)

TOLERANCE = 1e-4

#: switch: (case, config.json edit that reverts it; None deletes the key)
SWITCHES: dict[str, tuple[str, dict]] = {
    "bias": ("gqa_bias", {"bias": False}),
    "bias_default_on": ("no_bias", {"bias": None}),
    "num_key_value_heads": ("gqa_bias", {"num_key_value_heads": 4}),
    "tie_word_embeddings": ("mha_tied", {"tie_word_embeddings": False}),
    "rope_scaling_dynamic": ("rope_dynamic", {"rope_scaling": None,
                                              "max_position_embeddings": 256}),
    "rope_scaling_linear": ("rope_linear", {"rope_scaling": None}),
}

REJECTED: dict[str, tuple[dict, str]] = {
    "rope_type": ({"rope_scaling": {"type": "ntk-by-parts", "factor": 2.0}}, "ntk-by-parts"),
    "bias_type": ({"bias": "yes"}, "'bias' must be"),
}

PARITY_CASES = [(c, ep, run) for c in sorted(CONFIGS) for ep in ("default", "cpu")
                for run in ("padded", "unpadded")]


@pytest.mark.parametrize("case,ep,run", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_remapped_llama(tmp_path, case, ep, run):
    result = f32_recorded_run_parity(checkpoint(cases, case), tmp_path / "pkg", ep, run,
                                     reference(cases, case, run))  # (see the docstring)
    assert result.max_abs_diff <= TOLERANCE, f"{case}/{ep}/{run}: {result.max_abs_diff:.3g}"


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert = SWITCHES[switch]
    assert_revert_moves_logits(cases, case, revert, tmp_path, switch)


def test_checkpoint_is_the_hub_layout():
    """What the test builds is what the hub ships: auto_map code named, original names."""
    folder = checkpoint(cases, "gqa_bias")
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    assert raw["auto_map"]["AutoModelForCausalLM"] == "modeling_internlm2.InternLM2ForCausalLM"
    from safetensors import safe_open

    with safe_open(os.path.join(folder, "model.safetensors"), "np") as f:
        names = set(f.keys())
    assert {"model.tok_embeddings.weight", "output.weight", "model.layers.0.attention.wqkv.bias",
            "model.layers.1.feed_forward.w3.weight", "model.layers.1.ffn_norm.weight"} <= names


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    overrides, message = REJECTED[case]
    assert_rejected_up_front(tmp_path, {**TINY_PRESETS[PRESET], **overrides}, message)


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("case", ["gqa_bias", "rope_linear"])
def test_genai_generates_like_the_reference(tmp_path, case, ep):
    folder = case_dir(cases, case)
    path = mobius.build(os.path.join(folder, "ckpt"), execution_provider=ep).save(
        str(tmp_path / "pkg"))
    assert harness.genai_config(path)["model"]["type"] == "internlm2"
    genai_rows = harness.genai_generate(path, PROMPTS, NEW_TOKENS)
    hf_rows, margins = harness.load_hf_generate(os.path.join(folder, "transformers.json"))
    mismatch = [f"row {i}: genai {g} reference {h} (gaps {[round(m, 4) for m in gaps]})"
                for i, (g, h, gaps) in enumerate(zip(genai_rows, hf_rows, margins)) if g != h]
    assert not mismatch, f"{case}/{ep}:\n" + "\n".join(mismatch)
    assert all(len(row) == NEW_TOKENS for row in genai_rows)
