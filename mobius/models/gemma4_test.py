"""Gemma 4 text decoder: L3 parity per switch, the per-layer cache I/O, refused switches
(Gemma4ForConditionalGeneration's package with its vision tower: gemma4_vl_test.py).

* Every case is a transformers-written tiny checkpoint with every parameter random (the
  layer_scalar buffers too).
* Parity: f32 logits within 1e-4 of transformers over a batch of an unpadded and a
  left-padded row, prefill + 3 cached greedy decode steps (the window of 6 is passed),
  on the default EP (opset-23 Attention) and the cpu EP (GroupQueryAttention on the
  caching layers, standard Attention on the sharing ones).
* Switches: a case names the config.json edit that reverts its switch; the reverted
  config on the same weights must move the logits (or need tensors the checkpoint
  lacks / leave some unread).
"""

from __future__ import annotations

import pytest

from mobius.builder import build
from mobius.models import gemma4_cases as cases
from mobius.models.gemma4_cases import CONFIGS, PRESET
from mobius.tiny.presets import TINY_PRESETS
from testing.checkpoint_runs import checkpoint, reference
from testing.switch_checks import (assert_rejected_up_front, assert_revert_moves_logits,
                                   copy_case, edit_config, f32_package_parity)

TOLERANCE = 1e-4
SLIDING, FULL = "sliding_attention", "full_attention"

#: switch: (checkpoint, config.json edit that reverts it; None deletes the key).
SWITCHES: dict[str, tuple[str, dict]] = {
    "attention_k_eq_v": ("base", {"attention_k_eq_v": False}),
    "num_kv_shared_layers": ("base", {"num_kv_shared_layers": 0}),
    "use_double_wide_mlp": ("base", {"use_double_wide_mlp": False}),
    "hidden_size_per_layer_input": ("base", {"hidden_size_per_layer_input": 0}),
    "vocab_size_per_layer_input": ("base", {"vocab_size_per_layer_input": 1000}),
    "final_logit_softcapping": ("base", {"final_logit_softcapping": None}),
    "sliding_window": ("base", {"sliding_window": 64}),
    "per_layer_config": ("plain", {"per_layer_config": {}}),
    # layer 3 global: a head_dim its weights lack (per_layer_config names layers 1 and 4)
    "layer_types": ("plain", {"layer_types": [SLIDING, FULL, SLIDING, FULL, FULL],
                              "per_layer_config": None, "global_head_dim": 32}),
    "partial_rotary_factor": ("plain", {"rope_parameters": {
        SLIDING: {"rope_type": "default", "rope_theta": 20000.0},
        FULL: {"rope_type": "proportional", "partial_rotary_factor": 1.0,
               "rope_theta": 500000.0}}}),
    "sliding_rope_theta": ("plain", {"rope_parameters": {
        SLIDING: {"rope_type": "default", "rope_theta": 10000.0},
        FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.5,
               "rope_theta": 500000.0}}}),
    "attention_bias": ("plain", {"attention_bias": False}),
    "tie_word_embeddings": ("plain", {"tie_word_embeddings": True}),
    "enable_moe_block": ("moe", {"enable_moe_block": False}),
    "top_k_experts": ("moe", {"top_k_experts": 3}),
}

#: overrides: message part; rejected before anything is built.
REJECTED: dict[str, tuple[dict, str]] = {
    "moe_top_k": ({**cases.MOE, "top_k_experts": 6}, "exceeds num_experts"),
    "no_text_config": ({"model_type": "gemma4",
                        "architectures": ["Gemma4ForConditionalGeneration"]}, "text_config"),
    "moe_size": ({**cases.MOE, "moe_intermediate_size": None}, "moe_intermediate_size"),
    "bidirectional": ({"use_bidirectional_attention": "all"}, "use_bidirectional_attention"),
    "no_producer": ({"num_kv_shared_layers": 4}, "leaves no full_attention layer"),
    "all_shared": ({"num_kv_shared_layers": 5}, "must be below num_hidden_layers"),
    "layer_type": ({"layer_types": [SLIDING, "chunked_attention", SLIDING, SLIDING, FULL]},
                   "layer_types must list"),
    "per_layer_key": ({"per_layer_config": {"1": {"sliding_window": 3}}}, "per_layer_config"),
}

PARITY_CASES = [(c, ep) for c in CONFIGS for ep in ("default", "cpu")]


def _fused_rotary(package) -> bool:
    return any(n.op_type == "GroupQueryAttention" and n.attributes.get("do_rotary") is not None
               and n.attributes["do_rotary"].value == 1 for n in package.models["model"].graph)


@pytest.mark.parametrize("case,ep", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_transformers(tmp_path, case, ep):
    """Where GroupQueryAttention applies RoPE itself (cpu), ORT's kernel takes decode-step
    positions from cache slots (ep/parity_suite.py): left-padded over the prefill only,
    unpadded over every step."""
    folder = checkpoint(cases, case)
    run, package = f32_package_parity(folder, tmp_path / "pkg", ep, reference(cases, case))
    if _fused_rotary(package):
        run, _ = f32_package_parity(folder, tmp_path / "pkg", ep, reference(cases, case),
                                    steps=0)
        unpadded, _ = f32_package_parity(folder, tmp_path / "pkg", ep,
                                         reference(cases, case, "unpadded"))
        assert unpadded.max_abs_diff <= TOLERANCE, f"{case}/{ep}: {unpadded.max_abs_diff:.3g}"
    assert run.max_abs_diff <= TOLERANCE, f"{case}/{ep}: {run.max_abs_diff:.3g}"


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert = SWITCHES[switch]
    assert_revert_moves_logits(cases, case, revert, tmp_path, switch)


def test_hub_global_keys_spell_the_per_layer_config(tmp_path):
    """Hub configs give global_head_dim / num_global_key_value_heads where transformers 5
    saves per_layer_config: the same layers, the same logits."""
    folder = copy_case(cases, "base", tmp_path / "hub")
    edit_config(folder, {"per_layer_config": None, "global_head_dim": 32,
                         "num_global_key_value_heads": 1})
    run, _ = f32_package_parity(folder, tmp_path / "pkg", "default", reference(cases, "base"))
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff


def test_each_layer_caches_its_own_shape_and_sharing_layers_none():
    """Sliding layers 0 and 2 cache [batch, 2, seq, 16], global layer 1 [batch, 1, seq, 32]
    (K serves as V); layers 3 and 4 read layers 2's and 1's and cache nothing. genai's
    gemma4_text type reads each layer's shape from these inputs."""
    package = build(checkpoint(cases, "base"), dtype="f32")
    graph = package.models["model"].graph
    for prefix, values, length in (("past_key_values.", graph.inputs, "past_sequence_length"),
                                   ("present.", graph.outputs, "total_sequence_length")):
        shapes = {v.name[len(prefix):]: [d if isinstance(d, int) else str(d) for d in v.shape]
                  for v in values if v.name.startswith(prefix)}
        expected = {f"{i}.{kind}": ["batch_size", heads, length, dim]
                    for i, heads, dim in ((0, 2, 16), (1, 1, 32), (2, 2, 16))
                    for kind in ("key", "value")}
        assert shapes == expected, shapes
    assert package.genai_config["model"]["type"] == "gemma4_text"


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    overrides, message = REJECTED[case]
    assert_rejected_up_front(tmp_path, {**TINY_PRESETS[PRESET], **overrides}, message)
