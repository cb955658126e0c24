"""ERNIE-4.5-MoE, EXAONE-MoE, GLM-4-MoE and MiniMax-M2 (expert choice biased apart from the
weights): L1 + L3 per switch.

* Every checkpoint is written by transformers with every parameter random and
  the all-zero tensors (correction biases, biases) randomized.
* L1: the preset builds for every EP and dtype it allows and passes the full
  ONNX checker; each sparse layer is one com.microsoft MoE exactly where the
  EP has the kernel (the routing is built in its fusable form:
  mobius/components/chosen_routing.py), the decomposed routing elsewhere.
* L3: f32 logits within 1e-4 of transformers over a batch of an unpadded and a
  left-padded row, prefill + 3 cached greedy decode steps, on the default and
  cpu EPs (cpu: GroupQueryAttention; padded decode steps only where its kernel
  does not rotate, as in moe_families_test); the cuda graph's fused MoE on
  onnxruntime's CPU EP MoE kernel.
* f16 / bf16 default-EP graphs: within 4 eps of the f32 reference.
* Switches: a case names the config.json edit that reverts it; the reverted
  config on the same weights moves the logits, or (a structural switch) fails
  on the tensors it expects. Zeroing the correction bias moves the logits.
"""

from __future__ import annotations

import json
import os
import shutil

import onnx
import pytest

from mobius.builder import build
from mobius.ep.registry import ep_registry
from mobius.errors import ConfigError, WeightsError
from mobius.models import ernie4_5_moe
from mobius.models import routed_moe_families_cases as cases
from mobius.models.registry import FAMILIES
from mobius.models.routed_moe_families_cases import CONFIGS, ERNIE, EXAONE, GLM, MINIMAX
from mobius.optimize.histogram import op_histogram
from mobius.tiny.presets import TINY_PRESETS
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype
from testing.model_runs import (BuiltPackage, assert_low_precision_parity,
                                 f32_parity)
from testing.checkpoint_runs import checkpoint, reference
from testing.ep_suite import Builds, Checkpoints

TOLERANCE = 1e-4
CHANGED = 1e-3  # a reverted switch must move some logit by at least this much
MOE = "com.microsoft::MoE"

#: switch: (case, config.json edit that reverts it, None: the logits move | the
#: WeightsError message part the reverted config's tensors raise).
SWITCHES: dict[str, tuple[str, dict, str | None]] = {
    "ernie_use_bias": ("ernie", {"use_bias": False}, "does not read"),
    "ernie_tie_word_embeddings": ("ernie_span_k3", {"tie_word_embeddings": True},
                                  "does not read"),
    "ernie_moe_k": ("ernie_span_k3", {"moe_k": 2}, None),
    "ernie_moe_num_shared_experts": ("ernie_span_k3", {"moe_num_shared_experts": 1}, "shape"),
    "ernie_moe_layer_start_index": ("ernie_span_k3", {"moe_layer_start_index": 1},
                                    "missing tensor 'model.layers.0.mlp.gate_proj"),
    "ernie_moe_layer_end_index": ("ernie_span_k3", {"moe_layer_end_index": -1},
                                  "missing tensor 'model.layers.3.mlp.gate.weight"),
    "ernie_moe_layer_interval": ("ernie_interval_norm_min", {"moe_layer_interval": 1},
                                 "missing tensor 'model.layers.0.mlp.gate.weight"),
    "ernie_moe_norm_min": ("ernie_interval_norm_min", {"moe_norm_min": 1e-12}, None),
    "ernie_shared_experts_absent": ("ernie_interval_norm_min", {"moe_num_shared_experts": 1},
                                    "missing tensor 'model.layers.1.mlp.shared_experts"),
    "exaone_moe_mlp_layer_types": ("exaone_moe_all_sparse", {"mlp_layer_types": None},
                                   "missing tensor 'model.layers.0.mlp.gate_proj"),
    "exaone_moe_first_k_dense_replace": ("exaone_moe", {"mlp_layer_types": None,
                                                        "first_k_dense_replace": 0},
                                         "missing tensor 'model.layers.0.mlp.e_score_correction"),
    "exaone_moe_num_shared_experts": ("exaone_moe_all_sparse", {"num_shared_experts": 1},
                                      "shape"),
    "exaone_moe_tie_word_embeddings": ("exaone_moe_all_sparse", {"tie_word_embeddings": False},
                                       "missing tensor 'lm_head.weight"),
    "exaone_moe_num_experts_per_tok": ("exaone_moe_all_sparse", {"num_experts_per_tok": 2},
                                       None),
    "exaone_moe_norm_topk_prob": ("exaone_moe", {"norm_topk_prob": False}, None),
    "exaone_moe_routed_scaling_factor": ("exaone_moe", {"routed_scaling_factor": 1.0}, None),
    "exaone_moe_topk_group": ("exaone_moe", {"topk_group": 4}, None),
    "exaone_moe_n_group": ("exaone_moe", {"n_group": 2, "topk_group": 1}, None),
    # a window longer than the prompt: the sliding layers see every token
    "exaone_moe_sliding_window": ("exaone_moe", {"sliding_window": 64}, None),
    "exaone_moe_layer_types": ("exaone_moe", {"layer_types": ["full_attention"] * 3}, None),
    "exaone_moe_sliding_window_pattern": ("exaone_moe", {"layer_types": None,
                                                         "sliding_window_pattern": 2}, None),
    "glm_attention_bias": ("glm", {"attention_bias": False}, "does not read"),
    "glm_use_qk_norm": ("glm", {"use_qk_norm": False}, "does not read"),
    "glm_tie_word_embeddings": ("glm_all_sparse", {"tie_word_embeddings": False},
                                "missing tensor 'lm_head.weight"),
    "glm_first_k_dense_replace": ("glm_all_sparse", {"first_k_dense_replace": 1},
                                  "missing tensor 'model.layers.0.mlp.gate_proj"),
    "glm_n_shared_experts": ("glm_all_sparse", {"n_shared_experts": 1}, "shape"),
    "glm_num_experts_per_tok": ("glm_all_sparse", {"num_experts_per_tok": 2}, None),
    "glm_norm_topk_prob_off": ("glm_all_sparse", {"norm_topk_prob": True}, None),
    "glm_norm_topk_prob": ("glm", {"norm_topk_prob": False}, None),
    "glm_routed_scaling_factor": ("glm", {"routed_scaling_factor": 1.0}, None),
    "glm_topk_group": ("glm", {"topk_group": 4}, None),
    "glm_n_group": ("glm", {"n_group": 2, "topk_group": 1}, None),
    "glm_partial_rotary_factor": ("glm", {"rope_parameters.partial_rotary_factor": 1.0}, None),
    "glm_partial_rotary_factor_full": ("glm_all_sparse",
                                       {"rope_parameters.partial_rotary_factor": None}, None),
    "minimax_m2_rotary_dim": ("minimax_m2", {"rotary_dim": None,
                                             "rope_parameters.partial_rotary_factor": None}, None),
    "minimax_m2_num_experts_per_tok": ("minimax_m2", {"num_experts_per_tok": 2}, None),
    "minimax_m2_num_local_experts": ("minimax_m2", {"num_local_experts": 5}, "shape"),
    "minimax_m2_head_dim_default": ("minimax_m2", {"head_dim": None}, "shape"),
    "minimax_m2_rope_theta_default": ("minimax_m2", {"rope_parameters.rope_theta": None}, None),
    "minimax_m2_tie_word_embeddings": ("minimax_m2_tied_top2_full_rotary",
                                       {"tie_word_embeddings": False},
                                       "missing tensor 'lm_head.weight"),
}

#: (preset, overrides, message part): values rejected before anything is built.
REJECTED: dict[str, tuple[str, dict, str]] = {
    "ernie_k_too_large": (ERNIE, {"moe_k": 7}, "moe_k"),
    "ernie_norm_min_negative": (ERNIE, {"moe_norm_min": -1.0}, "moe_norm_min"),
    "ernie_interval_zero": (ERNIE, {"moe_layer_interval": 0}, "moe_layer_interval"),
    "exaone_moe_groups_do_not_split": (EXAONE, {"n_group": 3}, "do not split into n_group=3"),
    "exaone_moe_too_few_kept": (EXAONE, {"topk_group": 1, "num_experts_per_tok": 3},
                                "kept groups"),
    "exaone_moe_no_shared_expert": (EXAONE, {"num_shared_experts": 0}, "num_shared_experts"),
    "exaone_moe_bad_mlp_layer_types": (EXAONE, {"mlp_layer_types": ["dense", "moe", "sparse"]},
                                       "mlp_layer_types must name"),
    "exaone_moe_no_sliding_window": (EXAONE, {"sliding_window": None}, "sliding_window null"),
    "exaone_moe_bad_pattern": (EXAONE, {"layer_types": None, "sliding_window_pattern": "LXG"},
                               "sliding_window_pattern 'LXG'"),
    "glm_groups_do_not_split": (GLM, {"n_group": 3}, "do not split into n_group=3"),
    "glm_too_few_kept": (GLM, {"topk_group": 1, "num_experts_per_tok": 3}, "kept groups"),
    "glm_no_shared_expert": (GLM, {"n_shared_experts": 0}, "n_shared_experts"),
    "minimax_m2_top_k_above_experts": (MINIMAX, {"num_experts_per_tok": 7}, "exceeds"),
    "minimax_m2_odd_rotary_dim": (MINIMAX, {"rotary_dim": 3}, "odd rotary dimension"),
}

#: preset -> (correction-bias tensor suffix, sparse-layer predicate on the package config)
PRESETS = {
    ERNIE: ("moe_statics.e_score_correction_bias",
            lambda c, i: ernie4_5_moe.is_sparse_layer(c.options, c.num_hidden_layers, i)),
    EXAONE: ("mlp.e_score_correction_bias",
             lambda c, i: c.options.mlp_layer_types[i] == "sparse"),
    GLM: ("gate.e_score_correction_bias",
          lambda c, i: i >= c.options.first_k_dense_replace),
    MINIMAX: ("block_sparse_moe.e_score_correction_bias", lambda c, i: True),
}


def _parity(folder, out, ep, ref, *, steps=3):
    """``folder`` built for ``ep`` (f32) against transformers' recorded run ``ref``."""
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(out), overwrite=True)
    run = f32_parity(BuiltPackage(path, package.config, "f32"), ref, steps=steps)
    return run, package


def _fused_rotary(package) -> bool:
    return any(n.op_type == "GroupQueryAttention" and n.attributes.get("do_rotary") is not None
               and n.attributes["do_rotary"].value == 1 for n in package.models["model"].graph)


def _sparse_layers(preset: str, config) -> int:
    sparse = PRESETS[preset][1]
    return sum(sparse(config, i) for i in range(config.num_hidden_layers))


PARITY_CASES = [(c, ep) for c in CONFIGS for ep in ("default", "cpu")]


@pytest.mark.parametrize("case,ep", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_transformers(tmp_path, case, ep):
    folder = checkpoint(cases, case)
    run, package = _parity(folder, tmp_path / "a", ep, reference(cases, case, "unpadded"))
    assert run.max_abs_diff <= TOLERANCE, f"{case}/{ep} unpadded: {run.max_abs_diff:.3g}"
    steps = 0 if _fused_rotary(package) else 3
    padded, _ = _parity(folder, tmp_path / "b", ep, reference(cases, case), steps=steps)
    assert padded.max_abs_diff <= TOLERANCE, f"{case}/{ep} left-padded: {padded.max_abs_diff:.3g}"


def _edited(folder: str, out: str, edit: dict) -> str:
    shutil.copytree(folder, out, copy_function=shutil.copyfile)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        raw = json.load(f)
    for key, value in edit.items():  # "a.b": key b of the dict under a; None drops it
        *parents, leaf = key.split(".")
        target = raw
        for parent in parents:
            target = target[parent]
        if value is None:
            target.pop(leaf, None)
        else:
            target[leaf] = value
    with open(path, "w") as f:
        json.dump(raw, f)
    return out


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverting_the_switch_changes_the_logits(tmp_path, switch):
    case, revert, error = SWITCHES[switch]
    reverted = _edited(checkpoint(cases, case), str(tmp_path / "reverted"), revert)
    if error is not None:
        with pytest.raises(WeightsError, match=error):
            build(reverted, dtype="f32")
        return
    run, _ = _parity(reverted, tmp_path / "pkg", "default", reference(cases, case))
    assert run.max_abs_diff > CHANGED, f"{switch}: changes nothing ({run.max_abs_diff:.3g})"


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_correction_bias_matters(tmp_path, preset):
    """The same checkpoint with the correction biases zeroed: far from transformers."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    case = next(c for c, (p, o) in CONFIGS.items() if p == preset and not o)
    zeroed = str(tmp_path / "zeroed")
    shutil.copytree(checkpoint(cases, case), zeroed, copy_function=shutil.copyfile)
    path = os.path.join(zeroed, "model.safetensors")
    tensors = load_file(path)
    names = [n for n in tensors if n.endswith(PRESETS[preset][0])]
    assert names
    for name in names:
        tensors[name] = np.zeros_like(tensors[name])
    save_file(tensors, path, metadata={"format": "pt"})
    run, _ = _parity(zeroed, tmp_path / "pkg", "default", reference(cases, case, "unpadded"))
    assert run.max_abs_diff > CHANGED, f"{preset}: the bias changes nothing"


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> Builds:
    """The EP suites' builds of the families' tiny presets: under Bazel the ``ep_builds``
    action made them once (//ep:suite_builds), elsewhere they are built here."""
    return Builds(Checkpoints(tmp_path_factory.mktemp("checkpoints")))


L1_CASES = [(preset, caps.name, SHORT_NAMES[dtype]) for preset in sorted(PRESETS)
            for caps in ep_registry if caps.tasks is None or "text-generation" in caps.tasks
            for dtype in sorted(caps.dtypes, key=lambda d: SHORT_NAMES[d])]


@pytest.mark.parametrize("preset,ep,dtype", L1_CASES, ids=["-".join(c) for c in L1_CASES])
def test_builds_for_every_ep_with_fused_moe_where_the_ep_has_it(builds, preset, ep, dtype):
    built = builds.get(next(f.name for f in FAMILIES if f.tiny_preset == preset), ep, dtype)
    histogram = op_histogram(built.model)
    caps = ep_registry.get(ep)
    blocks = _sparse_layers(preset, built.config)
    if caps.fuses_moe(parse_dtype(dtype)):
        assert histogram[MOE] == blocks, histogram
        assert not histogram.get("NonZero") and not histogram.get("ScatterND"), histogram
    else:
        assert not histogram.get(MOE), histogram
        assert histogram["NonZero"] == histogram["ScatterND"] > 0, histogram
    onnx.checker.check_model(built.onnx_bytes(), full_check=True)


@pytest.mark.parametrize("case", ["ernie", "ernie_interval_norm_min", "exaone_moe", "glm",
                                  "glm_all_sparse", "minimax_m2"])
def test_cuda_graph_with_fused_moe_matches_transformers_on_the_cpu_ep(tmp_path, case):
    run, package = _parity(checkpoint(cases, case), tmp_path, "cuda",
                           reference(cases, case, "unpadded"))
    preset = CONFIGS[case][0]
    assert op_histogram(package.models["model"])[MOE] == _sparse_layers(preset, package.config)
    assert run.max_abs_diff <= TOLERANCE, f"{case}/cuda f32: {run.max_abs_diff:.3g}"


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_values_are_rejected_up_front(tmp_path, case):
    preset, overrides, message = REJECTED[case]
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY_PRESETS[preset], **overrides}))
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=message):
        build(str(folder), dtype="f32").save(str(out))
    assert not out.exists()


def test_glm_multi_token_prediction_layers_are_left_unread(tmp_path):
    """Layer 2 of a 3-layer checkpoint read as a 2-layer model: an MTP layer only when
    num_nextn_predict_layers says so."""
    folder = checkpoint(cases, "glm_all_sparse")
    mtp = _edited(folder, str(tmp_path / "mtp"), {"num_hidden_layers": 2,
                                                  "num_nextn_predict_layers": 1})
    assert build(mtp, dtype="f32").config.num_hidden_layers == 2
    plain = _edited(folder, str(tmp_path / "plain"), {"num_hidden_layers": 2,
                                                      "num_nextn_predict_layers": 0})
    with pytest.raises(WeightsError, match="does not read"):
        build(plain, dtype="f32")


def test_exaone_moe_multi_token_prediction_tensors_are_left_unread(tmp_path):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    folder = str(tmp_path / "mtp")
    shutil.copytree(checkpoint(cases, "exaone_moe"), folder, copy_function=shutil.copyfile)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    tensors["mtp.layers.0.self_attn.q_proj.weight"] = np.ones((4, 4), np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    build(folder, dtype="f32")


def test_ernie_multi_token_prediction_tensors_are_left_unread(tmp_path):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    folder = str(tmp_path / "mtp")
    shutil.copytree(checkpoint(cases, "ernie"), folder, copy_function=shutil.copyfile)
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    tensors["model.mtp_linear_proj.0.weight"] = np.ones((4, 4), np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    build(folder, dtype="f32")
    tensors["model.layers.1.mlp.unknown.weight"] = np.ones((4, 4), np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(WeightsError, match="does not read"):
        build(folder, dtype="f32")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("case", ["ernie", "glm", "minimax_m2"])
def test_low_precision_runs_close_to_the_f32_reference(tmp_path, case, dtype):
    assert_low_precision_parity(checkpoint(cases, case), dtype, tmp_path / "pkg",
                                reference(cases, case), case)
