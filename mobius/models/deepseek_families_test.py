"""DeepSeek-V2 / V3 (multi-head latent attention, grouped MoE routing): L3 parity per switch.

* Every case is a transformers-written tiny checkpoint with every parameter
  random, and the all-zero buffers (V3's e_score_correction_bias) randomized.
* Parity: f32 logits within 1e-4 of transformers over a batch of an unpadded
  and a left-padded row, prefill + 3 cached greedy decode steps, on the default EP
  (opset-23 Attention) and the cpu EP (GroupQueryAttention with one KV head).
* Switches: a case names the config.json edit that reverts its switch; the
  reverted config on the same weights must move the logits (or, for a
  structural switch, need tensors the checkpoint lacks).
* The package caches the latent: present.{i}.key/.value are
  [batch, 1, total, qk_rope_head_dim + kv_lora_rank].
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from mobius.builder import build
from mobius.errors import ConfigError, WeightsError
from mobius.models import deepseek_families_cases as cases
from mobius.models.deepseek_families_cases import CONFIGS, V2, V3
from mobius.optimize.histogram import op_histogram
from mobius.tiny.presets import TINY_PRESETS
from testing.model_runs import (BuiltPackage, assert_low_precision_parity,
                                 f32_parity)
from testing.checkpoint_runs import checkpoint, reference

TOLERANCE = 1e-4
CHANGED = 1e-3  # a reverted switch must move some logit by at least this much

#: switch: (checkpoint, config.json edit that reverts it).
SWITCHES: dict[str, tuple[str, dict]] = {
    "v2_q_lora_rank": ("v2_q_lora_all_moe", {"q_lora_rank": None}),
    "v2_first_k_dense_replace": ("v2_q_lora_all_moe", {"first_k_dense_replace": 1}),
    "v2_topk_method": ("v2_group_limited", {"topk_method": "greedy"}),
    "v2_routed_scaling_factor": ("v2_group_limited", {"routed_scaling_factor": 1.0}),
    "v3_norm_topk_prob": ("v3", {"norm_topk_prob": False}),
    "v3_topk_group": ("v3", {"topk_group": 4}),
    "v3_routed_scaling_factor": ("v3", {"routed_scaling_factor": 1.0}),
    "v3_q_lora_rank": ("v3_no_q_lora_rope_half", {"q_lora_rank": 36}),
    "v3_rope_interleave": ("v3_no_q_lora_rope_half", {"rope_interleave": True}),
    "v3_mscale_all_dim": ("v3_yarn", {"rope_parameters.mscale_all_dim": None}),
}

#: switch -> the tensor its reverted config needs but the checkpoint lacks.
REVERT_NEEDS = {"v2_q_lora_rank": "q_proj", "v3_q_lora_rank": "q_a_proj",
                "v2_first_k_dense_replace": "mlp"}

#: Routing-only checkpoints: the cpu graph's routing is the default graph's (no MoE
#: kernel on cpu), so they are compared on the default EP only.
PARITY_CASES = [(c, ep) for c in CONFIGS for ep in ("default", "cpu")
                if ep == "default" or c not in ("v2_group_limited",)]

#: (preset, overrides, message part): values rejected before anything is built.
REJECTED: dict[str, tuple[str, dict, str]] = {
    "v2_norm_topk_prob": (V2, {"norm_topk_prob": True}, "norm_topk_prob=true"),
    "v2_noaux_tc": (V2, {"topk_method": "noaux_tc"}, "topk_method='noaux_tc'"),
    "v2_moe_layer_freq": (V2, {"moe_layer_freq": 2}, "moe_layer_freq=2"),
    "v3_groups_do_not_split": (V3, {"n_group": 3}, "do not split into n_group=3"),
    "v3_too_few_kept": (V3, {"topk_group": 1, "num_experts_per_tok": 3}, "kept groups"),
    "v3_q_lora_type": (V3, {"q_lora_rank": "big"}, "q_lora_rank"),
}


def _parity(folder, out, ep, case):
    """Row 0 unpadded, row 1 left-padded by 3; prefill + 3 decode steps, against
    transformers' recorded run on ``case``'s checkpoint."""
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(out), overwrite=True)
    run = f32_parity(BuiltPackage(path, package.config, "f32"), reference(cases, case), steps=3)
    return run, package


@pytest.mark.parametrize("case,ep", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_transformers(tmp_path, case, ep):
    run, package = _parity(checkpoint(cases, case), tmp_path / "pkg", ep, case)
    assert run.max_abs_diff <= TOLERANCE, f"{case}/{ep}: {run.max_abs_diff:.3g}"
    histogram = op_histogram(package.models["model"])
    layers = package.config.num_hidden_layers
    if ep == "cpu":  # MLA runs as GroupQueryAttention over the one latent KV head
        assert histogram["com.microsoft::GroupQueryAttention"] == layers, histogram


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert = SWITCHES[switch]
    reverted = str(tmp_path / "reverted")
    shutil.copytree(checkpoint(cases, case), reverted, copy_function=shutil.copyfile)
    config_path = os.path.join(reverted, "config.json")
    with open(config_path) as f:
        raw = json.load(f)
    for path, value in revert.items():  # "a.b": key b of the dict under a
        *parents, key = path.split(".")
        target = raw
        for parent in parents:
            target = target[parent]
        if value is None and parents:
            target.pop(key, None)
        else:
            target[key] = value
    with open(config_path, "w") as f:
        json.dump(raw, f)
    if switch in REVERT_NEEDS:
        with pytest.raises(WeightsError, match=REVERT_NEEDS[switch]):
            build(reverted, dtype="f32")
        return
    try:
        run, _ = _parity(reverted, tmp_path / "pkg", "default", case)
    except WeightsError as error:  # the reverted model leaves the switch's tensors unread
        assert "does not read" in str(error), error
        return
    assert run.max_abs_diff > CHANGED, (
        f"{switch}: the switch changes nothing ({run.max_abs_diff:.3g})")


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    preset, overrides, message = REJECTED[case]
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY_PRESETS[preset], **overrides}))
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=message):
        build(str(folder), dtype="f32").save(str(out))
    assert not out.exists()


@pytest.mark.parametrize("case", ["v2", "v3"])
def test_the_cache_holds_the_latent(tmp_path, case):
    """One KV head of qk_rope_head_dim + kv_lora_rank features, in the graph and genai_config."""
    preset, overrides = CONFIGS[case]
    assert not overrides  # the preset's own shapes
    package = build(checkpoint(cases, case), dtype="f32")
    raw = TINY_PRESETS[preset]
    width = raw["qk_rope_head_dim"] + raw["kv_lora_rank"]
    graph = package.models["model"].graph
    for value in [*graph.inputs, *graph.outputs]:
        if value.name.startswith(("past_key_values.", "present.")):
            assert list(value.shape)[1:2] + list(value.shape)[3:] == [1, width], value
    path = package.save(str(tmp_path / "pkg"))
    with open(os.path.join(path, "genai_config.json")) as f:
        decoder = json.load(f)["model"]["decoder"]
    assert (decoder["head_size"], decoder["num_key_value_heads"]) == (width, 1)


@pytest.mark.parametrize("case", ["v2_biases_scaled", "v2_group_limited", "v3"])
def test_routing_fuses_into_moe_on_cuda_and_matches(tmp_path, case):
    """V2 greedy (softmax top-k, scaled after the experts) is the MoE kernel's routing;
    the grouped and sigmoid routings are built in the form it fuses
    (mobius/components/chosen_routing.py). The cuda f32 graph runs on onnxruntime's
    CPU EP MoE kernel; the default graph keeps the routing decomposed."""
    folder = checkpoint(cases, case)
    run, package = _parity(folder, tmp_path / "cuda", "cuda", case)
    histogram = op_histogram(package.models["model"])
    assert histogram["com.microsoft::MoE"] == 1, histogram  # the one sparse layer
    assert not histogram.get("NonZero") and not histogram.get("ScatterND"), histogram
    assert run.max_abs_diff <= TOLERANCE, f"{case}/cuda f32: {run.max_abs_diff:.3g}"
    plain = op_histogram(build(folder, execution_provider="default", dtype="f32").models["model"])
    assert not plain.get("com.microsoft::MoE") and plain["NonZero"] == plain["ScatterND"] > 0


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", ["v2", "v3"])
def test_low_precision_runs_close_to_the_f32_reference(tmp_path, case, dtype):
    assert_low_precision_parity(checkpoint(cases, case), dtype, tmp_path / "pkg",
                                reference(cases, case), case)
