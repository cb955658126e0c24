"""LFM2-Audio and VideoChat-Flash (the architectures ORT GenAI's builder had and mobius had
not): built natively from checkpoints transformers has no class for, L3 parity, the
switches, the refused values and L4 genai greedy tokens.

* Checkpoints: the hub layout (LFM2-Audio: no model_type, the decoder's config nested
  under ``lfm``, its tensors under ``lfm.``; VideoChat-Flash: auto_map, Qwen2's names),
  every tensor random, plus tensors of the parts each family leaves unread
  (peer_families_cases.py).
* Reference: transformers' Lfm2ForCausalLM / Qwen2ForCausalLM with the weights remapped
  (testing/remapped_references.py), recorded at build time.
* Parity: f32 logits within 1e-4 over a left-padded and an unpadded batch, prefill + 3
  cached greedy decode steps, on the default and cpu EPs (a cpu graph whose
  GroupQueryAttention applies RoPE itself is compared left-padded over the prefill only:
  testing/switch_checks.f32_recorded_run_parity).
* Switches: each reverted switch on the same weights moves the logits or needs / leaves
  tensors the checkpoint lacks / holds; LFM2-Audio's ``tie_embedding`` is not read (its
  logits are the embedding's whatever it says).
* genai: onnxruntime-genai greedy-generates the reference's tokens (types
  ``lfm2_audio_text`` and the generic ``decoder``; LFM2-Audio's eos adds 128 and 130).
"""

from __future__ import annotations

import json
import os

import pytest
from safetensors import safe_open

import mobius
from mobius.models import peer_families_cases as cases
from mobius.models.peer_families_cases import (CONFIGS, LFM2_AUDIO, NEW_TOKENS, PROMPTS,
                                               UNREAD, VIDEOCHAT)
from mobius.tiny.presets import TINY_PRESETS
from testing import genai_harness as harness
from testing.checkpoint_runs import checkpoint, reference
from testing.reference_cases import case_dir
from testing.switch_checks import (assert_rejected_up_front, assert_revert_moves_logits,
                                   copy_case, edit_config, f32_package_parity,
                                   f32_recorded_run_parity)

TOLERANCE = 1e-4
LFM = TINY_PRESETS[LFM2_AUDIO]["lfm"]

#: switch: (case, config.json edit that reverts it; None deletes the key)
SWITCHES: dict[str, tuple[str, dict]] = {
    "lfm2_audio_lfm_section": ("lfm2_audio", {"lfm": {**LFM, "norm_eps": 0.5}}),
    "lfm2_audio_lfm_layer_types": ("lfm2_audio", {"lfm": {
        **LFM, "full_attn_idxs": None, "layer_types": ["conv", "conv", "full_attention"]}}),
    "videochat_tie_word_embeddings": ("videochat_flash_tied", {"tie_word_embeddings": False}),
    "videochat_untied_head": ("videochat_flash", {"tie_word_embeddings": True}),
    "videochat_rms_norm_eps": ("videochat_flash", {"rms_norm_eps": 0.5}),
}

#: (preset, config.json edit, the error's words)
REJECTED: dict[str, tuple[str, dict, str]] = {
    "lfm2_audio_no_lfm": (LFM2_AUDIO, {"lfm": None}, "needs an 'lfm' object"),
    "lfm2_audio_other_decoder": (LFM2_AUDIO, {"lfm": {**LFM, "model_type": "llama"}},
                                 "lfm model_type 'llama' is not supported"),
    "videochat_mm_llm_compress": (VIDEOCHAT, {"mm_llm_compress": True},
                                  "mm_llm_compress .* is not supported"),
    "videochat_mm_llm_compress_type": (VIDEOCHAT, {"mm_llm_compress": "yes"},
                                       "'mm_llm_compress' must be"),
}

PARITY_CASES = [(c, ep, run) for c in sorted(CONFIGS) for ep in ("default", "cpu")
                for run in ("padded", "unpadded")]


@pytest.mark.parametrize("case,ep,run", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_remapped_reference(tmp_path, case, ep, run):
    result = f32_recorded_run_parity(checkpoint(cases, case), tmp_path / "pkg", ep, run,
                                     reference(cases, case, run))
    assert result.max_abs_diff <= TOLERANCE, f"{case}/{ep}/{run}: {result.max_abs_diff:.3g}"


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert = SWITCHES[switch]
    assert_revert_moves_logits(cases, case, revert, tmp_path, switch)


def test_lfm2_audio_logits_are_the_embedding_whatever_tie_embedding_says(tmp_path):
    """liquid-audio projects on lfm.embed_tokens.weight; the checkpoint has no head."""
    folder = copy_case(cases, "lfm2_audio", tmp_path / "untied")
    edit_config(folder, {"lfm": {**LFM, "tie_embedding": False}})
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default",
                                reference(cases, "lfm2_audio"))
    assert run.max_abs_diff <= TOLERANCE


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_values_are_rejected_up_front(tmp_path, case):
    preset, edit, message = REJECTED[case]
    config = {k: v for k, v in {**TINY_PRESETS[preset], **edit}.items() if v is not None}
    assert_rejected_up_front(tmp_path, config, message)


@pytest.mark.parametrize("case,names", [
    ("lfm2_audio", {"lfm.embed_tokens.weight", "lfm.layers.1.self_attn.out_proj.weight",
                    "lfm.layers.0.conv.in_proj.weight", "lfm.embedding_norm.weight"}),
    ("videochat_flash", {"model.embed_tokens.weight", "lm_head.weight",
                         "model.layers.0.self_attn.q_proj.bias"}),
])
def test_checkpoint_is_the_hub_layout(case, names):
    """What the tests build is what the hub ships: the decoder under its own names, the
    parts the family leaves unread beside it, no transformers model_type."""
    folder = checkpoint(cases, case)
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    with safe_open(os.path.join(folder, "model.safetensors"), "np") as f:
        held = set(f.keys())
    preset = CONFIGS[case][0]
    assert names | {name for name, _ in UNREAD[preset]} <= held
    if preset == LFM2_AUDIO:
        assert "model_type" not in raw and "lfm" in raw and "encoder" in raw
    else:
        assert raw["auto_map"]["AutoModel"].startswith("modeling_videochat_flash.")


@pytest.mark.parametrize("case,genai_type", [("lfm2_audio", "lfm2_audio_text"),
                                             ("videochat_flash", "decoder")])
def test_genai_generates_like_the_reference(tmp_path, case, genai_type):
    folder = case_dir(cases, case)
    path = mobius.build(os.path.join(folder, "ckpt"), execution_provider="cpu").save(
        str(tmp_path / "pkg"))
    model = harness.genai_config(path)["model"]
    assert model["type"] == genai_type
    eos = model["eos_token_id"]
    assert (eos if isinstance(eos, list) else [eos]) == cases.eos_ids(case)
    genai_rows = harness.genai_generate(path, PROMPTS, NEW_TOKENS)
    hf_rows, margins = harness.load_hf_generate(os.path.join(folder, "transformers.json"))
    mismatch = [f"row {i}: genai {g} reference {h} (gaps {[round(m, 4) for m in gaps]})"
                for i, (g, h, gaps) in enumerate(zip(genai_rows, hf_rows, margins)) if g != h]
    assert not mismatch, f"{case}:\n" + "\n".join(mismatch)
