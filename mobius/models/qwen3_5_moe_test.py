"""Qwen 3.5 MoE (gated DeltaNet + gated attention, sparse MoE on every layer): L3 parity
per switch, state I/O, MTP.

* Every case is a transformers-written tiny checkpoint with every parameter random.
* Parity: f32 logits within 1e-4 of transformers over a batch of an unpadded and a
  left-padded row, prefill + 3 cached greedy decode steps feeding back each DeltaNet
  layer's conv and recurrent state, on the default EP and the cpu EP.
* Switches: a case names the config.json edit that reverts its switch; the reverted
  config on the same weights must move the logits (or need tensors the checkpoint
  lacks / leave some unread). Qwen3-Next's MoE switches, which transformers ignores
  here, must change nothing (the next_keys case).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from mobius.builder import build
from mobius.errors import WeightsError
from mobius.models import qwen3_5_moe_cases as cases
from mobius.models.qwen3_5_moe_cases import CONFIGS, PRESET
from mobius.optimize.histogram import op_histogram
from mobius.tiny.presets import TINY_PRESETS
from testing.checkpoint_runs import checkpoint, reference
from testing.switch_checks import (assert_rejected_up_front, assert_revert_moves_logits,
                                   copy_case, f32_package_parity)

TOLERANCE = 1e-4
LINEAR, FULL = "linear_attention", "full_attention"

#: switch: (checkpoint, config.json edit that reverts it; None deletes the key).
SWITCHES: dict[str, tuple[str, dict]] = {
    "num_experts_per_tok": ("top3_interval2", {"num_experts_per_tok": 2}),
    "num_experts": ("base", {"num_experts": 4}),
    "moe_intermediate_size": ("base", {"moe_intermediate_size": 40}),
    "shared_expert_intermediate_size": ("base", {"shared_expert_intermediate_size": 40}),
    "attention_bias": ("top3_interval2", {"attention_bias": False}),
    "tie_word_embeddings": ("top3_interval2", {"tie_word_embeddings": False}),
    "layer_types": ("base", {"layer_types": [LINEAR, FULL, LINEAR, FULL]}),
    "linear_num_value_heads": ("base", {"linear_num_value_heads": 2}),
    "linear_conv_kernel_dim": ("base", {"linear_conv_kernel_dim": 3}),
}

#: overrides: message part; rejected before anything is built.
REJECTED: dict[str, tuple[dict, str]] = {
    "top_k": ({"num_experts_per_tok": 6}, "num_experts_per_tok"),
    "no_experts": ({"num_experts": 0}, "num_experts"),
    "head_groups": ({"linear_num_value_heads": 3}, "linear_num_value_heads"),
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


def test_mtp_head_and_multimodal_names(tmp_path):
    """A released checkpoint's mtp.* head (here: random tensors added to the base case),
    with the decoder named model.language_model.* beside a vision tower, builds the same
    causal LM; any other unread tensor is still an error."""
    folder = copy_case(cases, "base", tmp_path / "mtp")
    path = os.path.join(folder, "model.safetensors")
    tensors = {name.replace("model.", "model.language_model.", 1): value
               for name, value in load_file(path).items()}
    tensors["model.visual.merger.norm.weight"] = tensors["model.language_model.norm.weight"]
    rng = np.random.default_rng(0)
    for name in ("mtp.fc.weight", "mtp.norm.weight", "mtp.layers.0.mlp.experts.0.up_proj.weight"):
        tensors[name] = rng.standard_normal((8, 4)).astype(np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default", reference(cases, "base"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff
    tensors["model.extra.weight"] = tensors["model.language_model.norm.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(WeightsError, match="does not read 1 checkpoint tensor"):
        build(folder, dtype="f32").save(str(tmp_path / "out"))


def test_states_and_genai_type():
    """DeltaNet layers carry conv_state / recurrent_state, the attention layer key/value;
    position_ids stay [batch, seq] for genai's qwen3_5_moe_text type."""
    package = build(checkpoint(cases, "base"), dtype="f32")
    graph = package.models["model"].graph
    names = sorted(v.name for v in graph.inputs if v.name.startswith("past_key_values."))
    assert names == sorted([f"past_key_values.{i}.{n}" for i in (0, 1, 3)
                            for n in ("conv_state", "recurrent_state")]
                           + ["past_key_values.2.key", "past_key_values.2.value"]), names
    positions = next(v for v in graph.inputs if v.name == "position_ids")
    assert len(positions.shape) == 2, positions.shape
    assert package.genai_config["model"]["type"] == "qwen3_5_moe_text"


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    overrides, message = REJECTED[case]
    assert_rejected_up_front(tmp_path, {**TINY_PRESETS[PRESET], **overrides}, message)
