"""Qwen 3.5 dense (gated DeltaNet + gated attention): L3 parity per switch, state I/O, MTP.

* Every case is a transformers-written tiny checkpoint with every parameter random
  (A_log, dt_bias, the (1 + w) norms and the DeltaNet's output norm included).
* Parity: f32 logits within 1e-4 of transformers over a batch of an unpadded and a
  left-padded row, prefill + 3 cached greedy decode steps in which each DeltaNet
  layer's conv and recurrent state are fed back, on the default EP (opset-23
  Attention) and the cpu EP. (Right padding, which onnxruntime-genai uses, is covered
  by mobius/components/gated_delta_net_test.py and dense_families_genai_test.py.)
* Switches: a case names the config.json edit that reverts its switch; the reverted
  config on the same weights must move the logits (or need tensors the checkpoint
  lacks / leave some unread). M-RoPE's sections must not matter for text.
"""

from __future__ import annotations

import os

import pytest
from safetensors.numpy import load_file, save_file

from mobius.builder import build
from mobius.errors import WeightsError
from mobius.models import qwen3_5_cases as cases
from mobius.models.qwen3_5_cases import CONFIGS, PRESET
from mobius.optimize.histogram import op_histogram
from mobius.tiny.presets import TINY_PRESETS
from testing.checkpoint_runs import checkpoint, reference
from testing.mtp_checkpoint import HEAD_TENSORS
from testing.switch_checks import (assert_rejected_up_front, assert_revert_moves_logits,
                                   copy_case, edit_config, f32_package_parity)

TOLERANCE = 1e-4
LINEAR, FULL = "linear_attention", "full_attention"

#: switch: (checkpoint, config.json edit that reverts it; None deletes the key).
SWITCHES: dict[str, tuple[str, dict]] = {
    "partial_rotary_factor": ("interval2_biases", {"rope_parameters": {
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}),
    "attention_bias": ("interval2_biases", {"attention_bias": False}),
    "tie_word_embeddings": ("interval2_biases", {"tie_word_embeddings": False}),
    "layer_types": ("base", {"layer_types": [LINEAR, FULL, LINEAR, FULL]}),
    "linear_num_value_heads": ("base", {"linear_num_value_heads": 2}),
    "linear_key_head_dim": ("base", {"linear_key_head_dim": 16}),
    "linear_value_head_dim": ("base", {"linear_value_head_dim": 16}),
    "linear_conv_kernel_dim": ("interval2_biases", {"linear_conv_kernel_dim": 4}),
}

#: overrides: message part; rejected before anything is built.
REJECTED: dict[str, tuple[dict, str]] = {
    "layer_type": ({"layer_types": [LINEAR, "sliding_attention", FULL, LINEAR]},
                   "sliding_attention"),
    "head_groups": ({"linear_num_value_heads": 3}, "linear_num_value_heads"),
    "short_conv": ({"linear_conv_kernel_dim": 1}, "linear_conv_kernel_dim"),
}

PARITY_CASES = [(c, ep) for c in CONFIGS for ep in ("default", "cpu")]


@pytest.mark.parametrize("case,ep", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_transformers(tmp_path, case, ep):
    folder = checkpoint(cases, case)
    run, package = f32_package_parity(folder, tmp_path / "pkg", ep, reference(cases, case))
    assert run.max_abs_diff <= TOLERANCE, f"{case}/{ep}: {run.max_abs_diff:.3g}"
    kinds = package.config.layer_types
    histogram = op_histogram(package.models["model"])
    assert histogram.get("Conv", 0) == histogram.get("Scan", 0) == kinds.count(LINEAR)


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert = SWITCHES[switch]
    assert_revert_moves_logits(cases, case, revert, tmp_path, switch)


def test_full_attention_interval_spells_the_layer_types(tmp_path):
    """Released checkpoints may give full_attention_interval, not layer_types (transformers
    writes the list it derives); the interval must give the same layers."""
    folder = copy_case(cases, "interval2_biases", tmp_path / "interval")
    edit_config(folder, {"layer_types": None, "full_attention_interval": 2})
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default",
                                reference(cases, "interval2_biases"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff


def test_mrope_sections_do_not_move_text_logits(tmp_path):
    """Every M-RoPE stream is the text position for text, so any split of the sections,
    interleaved or not, is plain RoPE: the recorded logits still hold."""
    folder = copy_case(cases, "base", tmp_path / "sections")
    edit_config(folder, {"rope_parameters": {
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
        "mrope_section": [0, 2, 0], "mrope_interleaved": False}})
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default", reference(cases, "base"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff


def test_mtp_head_is_left_unread_but_nothing_else(tmp_path):
    """The mtp case's checkpoint holds the MTP head (parity covers that it builds);
    any other tensor the model does not read is still an error."""
    folder = copy_case(cases, "mtp", tmp_path / "extra")
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    assert set(HEAD_TENSORS) <= set(tensors)
    tensors["model.extra.weight"] = tensors["model.norm.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(WeightsError, match="does not read 1 checkpoint tensor"):
        build(folder, dtype="f32").save(str(tmp_path / "out"))


def test_multimodal_names_are_read_and_the_vision_tower_left(tmp_path):
    """A checkpoint naming the decoder model.language_model.* beside a vision tower
    (model.visual.*), as the multimodal model saves it, builds the same text decoder."""
    folder = copy_case(cases, "base", tmp_path / "multimodal")
    path = os.path.join(folder, "model.safetensors")
    tensors = {name.replace("model.", "model.language_model.", 1): value
               for name, value in load_file(path).items()}
    tensors["model.visual.patch_embed.proj.weight"] = tensors["model.language_model.norm.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default", reference(cases, "base"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff


def test_states_are_genai_inputs_and_outputs():
    """DeltaNet layer i: past_key_values.{i}.conv_state [batch, 2 * keys + values,
    kernel - 1] and .recurrent_state [batch, value heads, k_dim, v_dim] in, present.{i}.*
    out; the attention layer keeps key/value; position_ids stay [batch, seq] and the
    genai_config type is genai's qwen3_5_text, which finds the states by name."""
    package = build(checkpoint(cases, "base"), dtype="f32")
    graph = package.models["model"].graph
    raw = TINY_PRESETS[PRESET]
    keys = raw["linear_num_key_heads"] * raw["linear_key_head_dim"]
    conv = [2 * keys + raw["linear_num_value_heads"] * raw["linear_value_head_dim"], 3]
    state = [raw["linear_num_value_heads"], raw["linear_key_head_dim"],
             raw["linear_value_head_dim"]]
    expected = {f"{i}.{name}": dims for i in (0, 1, 3)
                for name, dims in (("conv_state", conv), ("recurrent_state", state))}
    for prefix, values in (("past_key_values.", graph.inputs), ("present.", graph.outputs)):
        shapes = {v.name[len(prefix):]: [d if isinstance(d, int) else str(d) for d in v.shape]
                  for v in values if v.name.startswith(prefix)}
        assert {k: s[1:] for k, s in shapes.items() if "state" in k} == expected, shapes
        assert sorted(k for k in shapes if "state" not in k) == ["2.key", "2.value"], shapes
    positions = next(v for v in graph.inputs if v.name == "position_ids")
    assert len(positions.shape) == 2, positions.shape
    assert package.genai_config["model"]["type"] == "qwen3_5_text"


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    overrides, message = REJECTED[case]
    assert_rejected_up_front(tmp_path, {**TINY_PRESETS[PRESET], **overrides}, message)
