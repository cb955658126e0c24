"""ChatGLM (GLM-4-9b-chat / ChatGLM3 layout): a hub checkpoint with auto_map code, built
natively from config.json + safetensors, L3 parity per switch and L4 genai greedy tokens.

* Reference: transformers has no ChatGLM class, so it is transformers' GlmForCausalLM
  (what transformers converted ChatGLM into) with the checkpoint's weights remapped
  (chatglm_cases.py). The checkpoint is in the hub layout (original names, auto_map),
  every tensor random, biases included.
* Parity: f32 logits within 1e-4 over a left-padded and an unpadded batch, prefill + 3
  cached greedy decode steps, on the default and cpu EPs. A graph whose
  GroupQueryAttention applies RoPE itself is compared left-padded over the prefill only
  (ORT's GQA takes decode-step rotary positions from cache slots: a known kernel
  limitation, see ep/parity_suite.py); its unpadded run covers every step.
* Switches: each reverted switch on the same weights moves the logits or needs /
  leaves tensors the checkpoint lacks / holds; layouts no released checkpoint uses are
  refused up front.
* genai: onnxruntime-genai (model.type "chatglm") greedy-generates the reference's
  tokens on both packages; its context length is seq_length.
"""

from __future__ import annotations

import json
import os

import pytest

import mobius
from mobius.models import chatglm_cases as cases
from mobius.models.chatglm_cases import CONFIGS, NEW_TOKENS, PRESET, PROMPTS
from mobius.tiny.presets import TINY_PRESETS
from testing import genai_harness as harness
from testing.checkpoint_runs import checkpoint, reference
from testing.reference_cases import case_dir
from testing.switch_checks import (assert_rejected_up_front, assert_revert_moves_logits,
                                   f32_recorded_run_parity)

TOLERANCE = 1e-4

#: switch: (case, config.json edit that reverts it; None deletes the key)
SWITCHES: dict[str, tuple[str, dict]] = {
    "add_qkv_bias": ("gqa_qkv_bias", {"add_qkv_bias": None}),
    "multi_query_attention": ("gqa_qkv_bias", {"multi_query_attention": None}),
    "multi_query_group_num": ("gqa_qkv_bias", {"multi_query_group_num": 4}),
    "multi_query_attention_off": ("mha_no_bias", {"multi_query_attention": True}),
    "rope_ratio": ("gqa_qkv_bias", {"rope_ratio": None}),
    "kv_channels": ("mha_no_bias", {"kv_channels": 8}),
    "layernorm_epsilon": ("gqa_qkv_bias", {"layernorm_epsilon": 0.5}),
}

#: overrides: message part; refused before any weight is read
REJECTED: dict[str, tuple[dict, str]] = {
    "residual_post_layernorm": ({"apply_residual_connection_post_layernorm": True},
                                "apply_residual_connection_post_layernorm"),
    "rotate_half_rope": ({"original_rope": False}, "original_rope false"),
    "layer_norm": ({"rmsnorm": False}, "rmsnorm false"),
    "no_final_norm": ({"post_layer_norm": False}, "post_layer_norm false"),
    "bias_linear": ({"add_bias_linear": True}, "add_bias_linear"),
    "rope_ratio": ({"rope_ratio": 0}, "rope_ratio 0"),
}

PARITY_CASES = [(c, ep, run) for c in sorted(CONFIGS) for ep in ("default", "cpu")
                for run in ("padded", "unpadded")]


@pytest.mark.parametrize("case,ep,run", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_remapped_glm(tmp_path, case, ep, run):
    result = f32_recorded_run_parity(checkpoint(cases, case), tmp_path / "pkg", ep, run,
                                     reference(cases, case, run))  # (see the docstring)
    assert result.max_abs_diff <= TOLERANCE, f"{case}/{ep}/{run}: {result.max_abs_diff:.3g}"


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert = SWITCHES[switch]
    assert_revert_moves_logits(cases, case, revert, tmp_path, switch)


def test_checkpoint_is_the_hub_layout():
    """What the test builds is what the hub ships: auto_map code named, original names."""
    folder = checkpoint(cases, "gqa_qkv_bias")
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    assert raw["auto_map"]["AutoModel"] == "modeling_chatglm.ChatGLMForConditionalGeneration"
    from safetensors import safe_open

    with safe_open(os.path.join(folder, "model.safetensors"), "np") as f:
        names = set(f.keys())
    layer = "transformer.encoder.layers.1."
    assert {"transformer.embedding.word_embeddings.weight", "transformer.output_layer.weight",
            "transformer.encoder.final_layernorm.weight",
            layer + "self_attention.query_key_value.bias", layer + "mlp.dense_h_to_4h.weight",
            layer + "post_attention_layernorm.weight"} <= names


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    overrides, message = REJECTED[case]
    assert_rejected_up_front(tmp_path, {**TINY_PRESETS[PRESET], **overrides}, message)


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_genai_generates_like_the_reference(tmp_path, case, ep):
    folder = case_dir(cases, case)
    path = mobius.build(os.path.join(folder, "ckpt"), execution_provider=ep).save(
        str(tmp_path / "pkg"))
    config = harness.genai_config(path)
    assert config["model"]["type"] == "chatglm"
    assert config["model"]["context_length"] == TINY_PRESETS[PRESET]["seq_length"]
    genai_rows = harness.genai_generate(path, PROMPTS, NEW_TOKENS)
    hf_rows, margins = harness.load_hf_generate(os.path.join(folder, "transformers.json"))
    mismatch = [f"row {i}: genai {g} reference {h} (gaps {[round(m, 4) for m in gaps]})"
                for i, (g, h, gaps) in enumerate(zip(genai_rows, hf_rows, margins)) if g != h]
    assert not mismatch, f"{case}/{ep}:\n" + "\n".join(mismatch)
    assert all(len(row) == NEW_TOKENS for row in genai_rows)
