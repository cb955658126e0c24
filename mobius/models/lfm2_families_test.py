"""LFM2, LFM2-MoE and LFM3 (gated short convolutions + GQA attention; sigmoid-routed
experts; LFM3's sliding windows, head gates and sandwich norms):
L3 parity per switch, the state contract.

* Every case is a transformers-written tiny checkpoint with every parameter random
  (conv, in/out projection biases included), LFM2-MoE's zero-initialized expert_bias
  randomized too.
* Parity: f32 logits within 1e-4 of transformers, prefill + 3 cached decode steps, the
  conv states fed back as ``past_key_values.{i}.conv``: a batch of an unpadded and a
  left-padded row on the default EP; on the cpu EP (GroupQueryAttention with RoPE inside) the
  left-padded batch over the prefill and an unpadded one over every step (ORT's GQA
  kernel rotates a left-padded row's first prompt by cache slot: see
  ep/parity_suite.py; the conv layers themselves are exact either way).
* Switches: a case names the config.json edit that reverts its switch; the reverted
  config on the same weights must move the logits, or need tensors the checkpoint
  lacks / leave some unread.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from mobius.builder import build
from mobius.errors import ConfigError, WeightsError
from mobius.models import lfm2_families_cases as cases
from mobius.models.lfm2_families_cases import CONFIGS, LFM3, LFM3_ROPE, MOE, PRESET, edit
from mobius.tiny.presets import TINY_PRESETS
from testing.model_runs import (BuiltPackage, assert_low_precision_parity,
                                 f32_parity)
from testing.checkpoint_runs import checkpoint, reference
from testing.reference_cases import case_dir

TOLERANCE = 1e-4
CHANGED = 1e-3  # a reverted switch must move some logit by at least this much

#: switch: (checkpoint, config.json edit that reverts it).
SWITCHES: dict[str, tuple[str, dict]] = {
    "conv_bias": ("lfm2", {"conv_bias": False}),
    "conv_L_cache": ("attention_first_kernel5", {"conv_L_cache": 3}),
    "layer_types": ("lfm2", {"layer_types": ["full_attention", "conv", "conv"]}),
    "full_attn_idxs": ("ff_as_written", {"layer_types": None, "full_attn_idxs": [0]}),
    "tie_word_embeddings": ("attention_first_kernel5", {"tie_word_embeddings": False}),
    "norm_eps": ("attention_first_kernel5", {"norm_eps": 1e-5}),
    "block_auto_adjust_ff_dim": ("ff_as_written", {"block_auto_adjust_ff_dim": True}),
    "block_ffn_dim_multiplier": ("lfm2", {"block_ffn_dim_multiplier": 1.0}),
    "block_multiple_of": ("lfm2", {"block_multiple_of": 16}),
    "moe_use_expert_bias": ("moe", {"use_expert_bias": False}),
    "moe_norm_topk_prob": ("moe", {"norm_topk_prob": False}),
    "moe_routed_scaling_factor": ("moe", {"routed_scaling_factor": 1.0}),
    "moe_num_experts_per_tok": ("moe_plain_routing", {"num_experts_per_tok": 2}),
    "moe_num_dense_layers": ("moe_plain_routing", {"num_dense_layers": 1}),
    "moe_plain_norm_topk_prob": ("moe_plain_routing", {"norm_topk_prob": True}),
    "moe_unnormalized_routed_scaling_factor": ("moe_bias_unnormalized",
                                               {"routed_scaling_factor": 1.0}),
    "moe_unnormalized_norm_topk_prob": ("moe_bias_unnormalized", {"norm_topk_prob": True}),
    "lfm3_sliding_window": ("lfm3", {"sliding_window": 64}),
    "lfm3_layer_types": ("lfm3", {"layer_types": ["conv", "full_attention", "full_attention",
                                                  "conv"]}),
    "lfm3_proportional_rope": ("lfm3", {"rope_parameters": {**LFM3_ROPE, "full_attention": {
        "rope_type": "default", "rope_theta": 40000.0}}}),
    "lfm3_sliding_rope_theta": ("lfm3", {"rope_parameters": {**LFM3_ROPE, "sliding_attention": {
        "rope_type": "default", "rope_theta": 20000.0}}}),
    "lfm3_attention_bias": ("lfm3", {"attention_bias": False}),
    "lfm3_use_attention_gate": ("lfm3", {"use_attention_gate": False}),
    "lfm3_use_sandwich_norm": ("lfm3", {"use_sandwich_norm": False}),
    "lfm3_tie_word_embeddings": ("lfm3", {"tie_word_embeddings": False}),
    "lfm3_norm_eps": ("lfm3_plain", {"norm_eps": 1e-5}),
    "lfm3_conv_L_cache": ("lfm3_plain", {"conv_L_cache": 3}),
    "lfm3_conv_bias": ("lfm3_plain", {"conv_bias": False}),
}

PARITY_CASES = [(c, ep) for c in CONFIGS for ep in ("default", "cpu")]

#: (preset, overrides, message part): values rejected before anything is built.
REJECTED: dict[str, tuple[str, dict, str]] = {
    "kernel_1": (PRESET, {"conv_L_cache": 1}, "conv_L_cache must be at least 2"),
    "sliding_layer": (PRESET, {"layer_types": ["conv", "sliding_attention", "conv"]},
                      "layer_types must be"),
    "idx_type": (PRESET, {"full_attn_idxs": ["1"], "layer_types": None}, "full_attn_idxs"),
    "bias_type": (PRESET, {"conv_bias": "yes"}, "conv_bias"),
    "null_multiplier": (PRESET, {"block_ffn_dim_multiplier": None}, "block_ffn_dim_multiplier"),
    "moe_top_k": (MOE, {"num_experts_per_tok": 7}, "exceeds num_experts"),
    "moe_bias_type": (MOE, {"use_expert_bias": 1}, "use_expert_bias"),
    "lfm3_layer_type": (LFM3, {"layer_types": ["conv", "linear_attention", "full_attention",
                                               "conv"]}, "lfm3 layer_types must be"),
    "lfm3_flat_rope": (LFM3, {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}},
                       "nested by layer type"),
    "lfm3_kernel_1": (LFM3, {"conv_L_cache": 1}, "conv_L_cache must be at least 2"),
}


def _parity(folder, out, ep, ref, steps=3):
    """``folder`` built for ``ep`` (f32) against transformers' recorded run ``ref``."""
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(out), overwrite=True)
    return f32_parity(BuiltPackage(path, package.config, "f32"), ref, steps=steps), package


@pytest.mark.parametrize("case,ep", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_transformers(tmp_path, case, ep):
    folder, padded = checkpoint(cases, case), reference(cases, case)
    if ep == "default":
        run, _ = _parity(folder, tmp_path / "pkg", ep, padded)
        assert run.max_abs_diff <= TOLERANCE, f"{case}/{ep}: {run.max_abs_diff:.3g}"
        return
    prefill, package = _parity(folder, tmp_path / "a", ep, padded, steps=0)
    unpadded, _ = _parity(folder, tmp_path / "b", ep, reference(cases, case, "unpadded"))
    assert max(prefill.max_abs_diff, unpadded.max_abs_diff) <= TOLERANCE, (
        f"{case}/{ep}: padded prefill {prefill.max_abs_diff:.3g}, "
        f"unpadded {unpadded.max_abs_diff:.3g}")
    graph = package.models["model"].graph
    attention = sum(kind != "conv" for kind in package.config.layer_types)
    assert sum(n.op_type == "GroupQueryAttention" for n in graph) == attention


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert = SWITCHES[switch]
    reverted = str(tmp_path / "reverted")
    shutil.copytree(checkpoint(cases, case), reverted, copy_function=shutil.copyfile)
    edit(reverted, revert)
    try:
        run, _ = _parity(reverted, tmp_path / "pkg", "default", reference(cases, case))
    except WeightsError:  # the reverted model needs other tensors or leaves some unread
        return
    assert run.max_abs_diff > CHANGED, (
        f"{switch}: the switch changes nothing ({run.max_abs_diff:.3g})")


def test_rope_theta_defaults_to_1e6(tmp_path):
    """A config.json without a RoPE base: transformers' Lfm2Config uses 1e6, so must we
    (10000, the base the weights were saved with, gives other logits)."""
    bare = str(tmp_path / "bare")
    shutil.copytree(checkpoint(cases, "lfm2_no_rope"), bare, copy_function=shutil.copyfile)
    with open(os.path.join(case_dir(cases, "lfm2_no_rope"), "facts.json")) as f:
        assert json.load(f)["rope_theta"] == 1e6  # transformers' base for this config.json
    hf_run = reference(cases, "lfm2_no_rope")
    run, _ = _parity(bare, tmp_path / "a", "default", hf_run)
    assert run.max_abs_diff <= TOLERANCE, run.max_abs_diff
    edit(bare, {"rope_theta": 10000.0})
    run, _ = _parity(bare, tmp_path / "b", "default", hf_run)
    assert run.max_abs_diff > CHANGED, run.max_abs_diff


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_values_are_rejected_up_front(tmp_path, case):
    preset, overrides, message = REJECTED[case]
    folder = tmp_path / "ckpt"
    folder.mkdir()
    raw = {**TINY_PRESETS[preset], **overrides}
    (folder / "config.json").write_text(json.dumps(raw))
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=message):
        build(str(folder), dtype="f32").save(str(out))
    assert not out.exists()


def test_the_conv_layers_carry_their_state(tmp_path):
    """Conv layers: past_key_values.{i}.conv / present.{i}.conv [batch, hidden,
    conv_L_cache - 1] and no KV cache; attention layers: KV only. genai_config names them
    as genai's lfm2 reads."""
    package = build(checkpoint(cases, "attention_first_kernel5"), dtype="f32")
    graph = package.models["model"].graph
    shapes = {v.name: [d if isinstance(d, int) else str(d) for d in v.shape]
              for v in [*graph.inputs, *graph.outputs]}
    for i in (1, 2):
        assert (shapes[f"past_key_values.{i}.conv"] == shapes[f"present.{i}.conv"]
                == ["batch_size", 64, 4])
        assert f"past_key_values.{i}.key" not in shapes
    assert "past_key_values.0.conv" not in shapes and "past_key_values.0.key" in shapes
    path = package.save(str(tmp_path / "pkg"))
    with open(os.path.join(path, "genai_config.json")) as f:
        model = json.load(f)["model"]
    decoder = model["decoder"]
    assert model["type"] == "lfm2"
    assert decoder["layer_types"] == ["full_attention", "conv", "conv"]
    assert decoder["conv_cache_size"] == 4
    assert decoder["inputs"]["past_conv_names"] == "past_key_values.%d.conv"
    assert decoder["outputs"]["present_conv_names"] == "present.%d.conv"


def test_lfm2_spellings_are_read(tmp_path):
    """Lfm2Config's block_ff_dim and tie_embedding win over intermediate_size /
    tie_word_embeddings, as in transformers."""
    from mobius.models.lfm2 import FAMILY

    raw = {**TINY_PRESETS[PRESET], "block_ff_dim": 343, "tie_embedding": True}
    config = FAMILY.make_config(raw)
    assert config.tie_word_embeddings
    assert config.intermediate_size == 12 * -(-int(1.5 * int(2 * 343 / 3)) // 12)


def test_the_expert_bias_changes_the_choice(tmp_path):
    """The same checkpoint with expert_bias zeroed: far from transformers (the bias moves
    which experts are chosen, not their weights)."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    zeroed = str(tmp_path / "zeroed")
    shutil.copytree(checkpoint(cases, "moe_bias_unnormalized"), zeroed,
                    copy_function=shutil.copyfile)
    path = os.path.join(zeroed, "model.safetensors")
    tensors = load_file(path)
    names = [n for n in tensors if n.endswith(".feed_forward.expert_bias")]
    assert len(names) == 2 and all(tensors[n].any() for n in names)
    for name in names:
        tensors[name] = np.zeros_like(tensors[name])
    save_file(tensors, path, metadata={"format": "pt"})
    run, _ = _parity(zeroed, tmp_path / "pkg", "default",
                     reference(cases, "moe_bias_unnormalized", "unpadded"))
    assert run.max_abs_diff > CHANGED, f"the expert bias changes nothing ({run.max_abs_diff:.3g})"


@pytest.mark.parametrize("case", ["moe", "moe_plain_routing", "moe_bias_unnormalized"])
def test_cuda_graph_with_fused_moe_matches_transformers_on_the_cpu_ep(tmp_path, case):
    """Each sparse layer is one com.microsoft MoE where the EP has the kernel (the
    routing is built in the form mobius/components/chosen_routing.py fuses), run here on
    onnxruntime's CPU MoE kernel; an EP without it keeps the routing decomposed."""
    from mobius.ep.registry import ep_registry
    from mobius.models.lfm2_moe import moe_options
    from mobius.optimize.histogram import op_histogram

    assert ep_registry.get("cuda").has_kernel("MoE")
    folder = checkpoint(cases, case)
    run, package = _parity(folder, tmp_path, "cuda", reference(cases, case, "unpadded"))
    config = package.config
    sparse = config.num_hidden_layers - moe_options(config).num_dense_layers
    histogram = op_histogram(package.models["model"])
    assert histogram["com.microsoft::MoE"] == sparse, histogram
    assert not histogram.get("NonZero") and not histogram.get("ScatterND"), histogram
    assert run.max_abs_diff <= TOLERANCE, f"{case}/cuda f32: {run.max_abs_diff:.3g}"
    plain = op_histogram(build(folder, execution_provider="default", dtype="f32").models["model"])
    assert not plain.get("com.microsoft::MoE") and plain["NonZero"] == plain["ScatterND"] > 0


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", ["lfm2", "moe", "lfm3"])
def test_low_precision_runs_close_to_the_f32_reference(tmp_path, case, dtype):
    assert_low_precision_parity(checkpoint(cases, case), dtype, tmp_path / "pkg",
                                reference(cases, case), case)
