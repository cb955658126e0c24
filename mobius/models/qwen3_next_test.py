"""Qwen3-Next (gated DeltaNet + gated attention, MoE): L3 parity per switch, state I/O.

* Every case is a transformers-written tiny checkpoint with every parameter random
  (A_log, dt_bias, the (1 + w) norms and the DeltaNet's output norm included).
* Parity: f32 logits within 1e-4 of transformers over a batch of an unpadded and a
  left-padded row, prefill + 3 cached greedy decode steps in which each DeltaNet
  layer's conv and recurrent state are fed back, on the default EP (opset-23
  Attention) and the cpu EP. (Right padding, which onnxruntime-genai uses, is covered
  by mobius/components/gated_delta_net_test.py and dense_families_genai_test.py.)
* Switches: a case names the config.json edit that reverts its switch; the reverted
  config on the same weights must move the logits (or need tensors the checkpoint
  lacks / leave some unread).
"""

from __future__ import annotations

import pytest

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.models import qwen3_next_cases as cases
from mobius.models.qwen3_next_cases import CONFIGS, PRESET
from mobius.optimize.histogram import op_histogram
from mobius.tiny.presets import TINY_PRESETS
from testing.checkpoint_runs import checkpoint, reference
from testing.mtp_checkpoint import add_mtp_head
from testing.switch_checks import (assert_rejected_up_front, assert_revert_moves_logits,
                                   copy_case, edit_config, f32_package_parity)

TOLERANCE = 1e-4
LINEAR, FULL = "linear_attention", "full_attention"

#: switch: (checkpoint, config.json edit that reverts it; None deletes the key).
SWITCHES: dict[str, tuple[str, dict]] = {
    "norm_topk_prob": ("moe", {"norm_topk_prob": False}),
    "partial_rotary_factor": ("dense_biases_interval2", {"rope_parameters": {
        "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}),
    "mlp_only_layers": ("moe", {"mlp_only_layers": []}),
    "decoder_sparse_step": ("sparse_step2", {"decoder_sparse_step": 1}),
    "num_experts": ("dense_biases_interval2", {"num_experts": 5}),
    "attention_bias": ("dense_biases_interval2", {"attention_bias": False}),
    "layer_types": ("moe", {"layer_types": [LINEAR, FULL, LINEAR, FULL]}),
    "linear_num_value_heads": ("moe", {"linear_num_value_heads": 2}),
    "linear_conv_kernel_dim": ("sparse_step2", {"linear_conv_kernel_dim": 4}),
}

#: overrides: message part; rejected before anything is built.
REJECTED: dict[str, tuple[dict, str]] = {
    "layer_type": ({"layer_types": [LINEAR, "sliding_attention", LINEAR, FULL]},
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
    """Released checkpoints give full_attention_interval, not layer_types (transformers
    writes the list it derives); the interval must give the same layers."""
    folder = copy_case(cases, "dense_biases_interval2", tmp_path / "interval")
    edit_config(folder, {"layer_types": None, "full_attention_interval": 2})
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default",
                     reference(cases, "dense_biases_interval2"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff


def test_states_are_genai_inputs_and_outputs():
    """DeltaNet layer i: past_key_values.{i}.conv_state [batch, 2 * keys + values,
    kernel - 1] and .recurrent_state [batch, value heads, k_dim, v_dim] in, present.{i}.*
    out; the attention layer keeps key/value. onnxruntime-genai finds the states by name."""
    graph = build(checkpoint(cases, "moe"), dtype="f32").models["model"].graph
    raw = TINY_PRESETS[PRESET]
    keys = raw["linear_num_key_heads"] * raw["linear_key_head_dim"]
    conv = [2 * keys + raw["linear_num_value_heads"] * raw["linear_value_head_dim"], 3]
    state = [raw["linear_num_value_heads"], raw["linear_key_head_dim"],
             raw["linear_value_head_dim"]]
    expected = {f"{i}.{name}": dims for i in range(3)
                for name, dims in (("conv_state", conv), ("recurrent_state", state))}
    for prefix, values in (("past_key_values.", graph.inputs), ("present.", graph.outputs)):
        shapes = {v.name[len(prefix):]: [d if isinstance(d, int) else str(d) for d in v.shape]
                  for v in values if v.name.startswith(prefix)}
        assert {k: s[1:] for k, s in shapes.items() if "state" in k} == expected, shapes
        assert sorted(k for k in shapes if "state" not in k) == ["3.key", "3.value"], shapes


def test_the_mtp_head_is_left_unread(tmp_path):
    """Released checkpoints ship mtp.*: the decoder builds unchanged beside it, and --mtp,
    which this family does not build, is refused by name."""
    folder = copy_case(cases, "moe", tmp_path / "mtp")
    add_mtp_head(str(folder), "model.layers.3.")
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default", reference(cases, "moe"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff
    with pytest.raises(MobiusError, match="qwen3_next family has no multi-token-prediction"):
        build(str(folder), mtp=True)


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    overrides, message = REJECTED[case]
    assert_rejected_up_front(tmp_path, {**TINY_PRESETS[PRESET], **overrides}, message)
