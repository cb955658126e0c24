"""Gemma 3n text decoder: L3 parity per switch, the multimodal checkpoint built text-only,
refused switches.

* Every case is a transformers-written tiny checkpoint with every parameter random
  (gemma3n_cases.py); its prompts hold ids beyond the per-layer table (1000..).
* Parity: f32 logits within 1e-4 of transformers over a batch of an unpadded and a
  left-padded row, prefill + 3 cached greedy decode steps (the window of 6 is passed),
  on the default EP and the cpu EP.
* Switches: a case names the config.json edit that reverts its switch; the reverted
  config on the same weights must move the logits (or need tensors the checkpoint
  lacks / leave some unread / resize some).
"""

from __future__ import annotations

import json
import os

import pytest
from safetensors.numpy import load_file, save_file

from mobius.models import gemma3n_cases as cases
from mobius.models.gemma3n_cases import CONFIGS, PRESET
from mobius.tiny.presets import TINY_PRESETS
from testing.checkpoint_runs import checkpoint, reference
from testing.switch_checks import (assert_rejected_up_front, assert_revert_moves_logits,
                                   copy_case, edit_config, f32_package_parity,
                                   f32_recorded_run_parity)

TOLERANCE = 1e-4
SLIDING, FULL = "sliding_attention", "full_attention"
_ROPES = {SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
          FULL: {"rope_type": "default", "rope_theta": 1000000.0}}

#: switch: (checkpoint, config.json edit that reverts it; None deletes the key).
SWITCHES: dict[str, tuple[str, dict]] = {
    "activation_sparsity_pattern": ("base", {"activation_sparsity_pattern": [0.0] * 5}),
    "altup_active_idx": ("base", {"altup_active_idx": 0}),
    "altup_num_inputs": ("base", {"altup_num_inputs": 4}),
    "laurel_rank": ("base", {"laurel_rank": 10}),
    "num_kv_shared_layers": ("base", {"num_kv_shared_layers": 0}),
    "final_logit_softcapping": ("base", {"final_logit_softcapping": None}),
    "sliding_window": ("base", {"sliding_window": 64}),
    "layer_types": ("base", {"layer_types": [FULL, SLIDING, SLIDING, SLIDING, FULL]}),
    "full_rope_theta": ("base", {"rope_parameters": {
        **_ROPES, FULL: {"rope_type": "default", "rope_theta": 500000.0}}}),
    "sliding_rope_theta": ("base", {"rope_parameters": {
        **_ROPES, SLIDING: {"rope_type": "default", "rope_theta": 20000.0}}}),
    "hidden_size_per_layer_input": ("base", {"hidden_size_per_layer_input": 4}),
    "vocab_size_per_layer_input": ("base", {"vocab_size_per_layer_input": 1031}),
    "intermediate_size": ("base", {"intermediate_size": 172}),
    "hidden_activation": ("base", {"hidden_activation": "silu"}),
    "tie_word_embeddings": ("base", {"tie_word_embeddings": False}),
    "altup_correct_scale": ("plain", {"altup_correct_scale": True}),
    "attention_bias": ("plain", {"attention_bias": False}),
}

#: config.json as the hub's checkpoints spell plain's (transformers 4.53): RoPE bases as
#: rope_theta / rope_local_base_freq and the full layers' rope_scaling, one
#: intermediate_size, no sparsity list
HUB_KEYS = {"rope_parameters": None, "rope_theta": 500000.0, "rope_local_base_freq": 20000.0,
            "rope_scaling": {"rope_type": "linear", "factor": 2.0},
            "intermediate_size": 150, "activation_sparsity_pattern": None}
#: the hub's spelling (test_hub_config_keys) with one key left out
SWITCHES.update({key: ("plain", {**HUB_KEYS, key: None})
                 for key in ("rope_theta", "rope_local_base_freq", "rope_scaling")})

#: overrides of the preset: message part; rejected before anything is built.
REJECTED: dict[str, tuple[dict, str]] = {
    "active_stream": ({"altup_active_idx": 3}, "not one of the 3 AltUp streams"),
    "no_streams": ({"altup_num_inputs": 0}, "'altup_num_inputs' must be a positive integer"),
    "sparsity_length": ({"activation_sparsity_pattern": [0.5]}, "lists 1 values for 5"),
    "sparsity_one": ({"activation_sparsity_pattern": [1.0, 0, 0, 0, 0]}, r"lie in \[0, 1\)"),
    "widths_length": ({"intermediate_size": [100, 100]}, "intermediate_size lists 2 values"),
    "no_producer": ({"num_kv_shared_layers": 4}, "leaves no full_attention layer"),
    "all_shared": ({"num_kv_shared_layers": 5}, "must be below num_hidden_layers"),
    "layer_type": ({"layer_types": [SLIDING, "chunked_attention", SLIDING, SLIDING, FULL]},
                   "layer_types must list"),
    "no_text_config": ({"model_type": "gemma3n",
                        "architectures": ["Gemma3nForConditionalGeneration"]}, "text_config"),
}

PARITY_CASES = [(c, ep) for c in CONFIGS for ep in ("default", "cpu")]


@pytest.mark.parametrize("case,ep", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_transformers(tmp_path, case, ep):
    run = f32_recorded_run_parity(checkpoint(cases, case), tmp_path / "pkg", ep, "padded",
                                  reference(cases, case))
    assert run.max_abs_diff <= TOLERANCE, f"{case}/{ep}: {run.max_abs_diff:.3g}"


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert = SWITCHES[switch]
    assert_revert_moves_logits(cases, case, revert, tmp_path, switch)


def test_hub_config_keys(tmp_path):
    """The hub's spellings of plain's switches give the same logits."""
    folder = copy_case(cases, "plain", tmp_path / "hub")
    edit_config(folder, HUB_KEYS)
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default", reference(cases, "plain"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff


def _multimodal_layout(folder: str, out) -> str:
    """The base checkpoint as the released Gemma3nForConditionalGeneration ones hold it:
    the decoder under model.language_model, its config under text_config, towers beside
    it, a K norm left on a sharing layer."""
    os.makedirs(out)
    with open(os.path.join(folder, "config.json")) as f:
        text = json.load(f)
    raw = {"model_type": "gemma3n", "architectures": ["Gemma3nForConditionalGeneration"],
           "text_config": text, "vision_config": {"model_type": "gemma3n_vision"},
           "audio_config": {"model_type": "gemma3n_audio", "hidden_size": 40}}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(raw, f)
    tensors = {name.replace("model.", "model.language_model.", 1): value
               for name, value in load_file(os.path.join(folder, "model.safetensors")).items()}
    for part in ("vision_tower.timm_model.conv_stem.weight", "audio_tower.conformer.0.weight",
                 "embed_vision.embedding.weight", "embed_audio.embedding.weight",
                 "language_model.layers.3.self_attn.k_norm.weight"):  # a sharing layer's
        tensors["model." + part] = tensors["model.language_model.norm.weight"].copy()
    save_file(tensors, os.path.join(out, "model.safetensors"))
    return str(out)


def test_multimodal_checkpoint_builds_the_text_decoder(tmp_path):
    """The same weights in the multimodal layout give transformers' text logits; the
    sharing layers 3 and 4 cache nothing."""
    folder = _multimodal_layout(checkpoint(cases, "base"), tmp_path / "mm")
    run, package = f32_package_parity(folder, tmp_path / "pkg", "default",
                                      reference(cases, "base"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff
    names = {v.name for v in package.models["model"].graph.inputs}
    assert {f"past_key_values.{i}.key" for i in range(5)} & names == {
        f"past_key_values.{i}.key" for i in range(3)}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    overrides, message = REJECTED[case]
    assert_rejected_up_front(tmp_path, {**TINY_PRESETS[PRESET], **overrides}, message)
