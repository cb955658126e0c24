"""Decoder families of issue 11 (OLMo, StarCoder2, StableLM, Cohere, GLM, Nemotron, ...,
and gpt-oss's switches): L3 parity with transformers for each family and each config
switch it reads.

* Every case is a transformers-written tiny checkpoint in which **every**
  parameter is random (biases and norm shifts included:
  testing/random_checkpoint.py).
* Parity: f32 logits within 1e-4 of transformers over a left-padded batch
  prefill + 3 cached greedy decode steps, on the default and cpu EPs. Graphs
  whose GroupQueryAttention applies RoPE itself are compared unpadded over
  every step and left-padded over the prefill only (ORT's GQA kernel takes
  decode-step rotary positions from cache slots: a known kernel limitation,
  see ep/parity_suite.py).
* Switches: a case that sets a switch to a non-default value also names the
  config.json edit that reverts it (``revert``); the graph built from the same
  weights with the reverted config must give different logits, so the case
  proves both that the switch is read and that it changes the output.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from mobius.builder import build
from mobius.errors import ConfigError, WeightsError
from testing.hf_checkpoints import load_hf_model
from testing.model_runs import BuiltPackage, f32_parity
from testing.random_checkpoint import random_checkpoint

TOLERANCE = 1e-4
#: A reverted switch must move some logit by at least this much.
CHANGED = 1e-3

#: case: (tiny preset, config overrides, config.json edit that reverts the switch or None).
CASES: dict[str, tuple[str, dict, dict | None]] = {
    "olmo": ("tiny-olmo", {}, None),
    "olmo_clip_qkv": ("tiny-olmo", {}, {"clip_qkv": None}),
    "olmo_no_bias": ("tiny-olmo", {"attention_bias": False, "clip_qkv": None}, None),
    "starcoder2": ("tiny-starcoder2", {}, {"use_bias": False}),
    "starcoder2_sliding_window": ("tiny-starcoder2", {"sliding_window": 4},
                                  {"sliding_window": None}),
    "stablelm": ("tiny-stablelm", {}, {"qk_layernorm": False}),
    "stablelm_qkv_bias": ("tiny-stablelm", {}, {"use_qkv_bias": False}),
    "stablelm_parallel_residual": ("tiny-stablelm", {"use_parallel_residual": True},
                                   {"use_parallel_residual": False}),
    "stablelm_rotary_half": ("tiny-stablelm", {"partial_rotary_factor": 0.5},
                             {"rope_parameters.partial_rotary_factor": None}),
    "cohere": ("tiny-cohere", {}, {"use_qk_norm": False}),
    "cohere_logit_scale": ("tiny-cohere", {}, {"logit_scale": None}),
    "cohere_untied": ("tiny-cohere", {"tie_word_embeddings": False, "use_qk_norm": False}, None),
    "cohere2": ("tiny-cohere2", {}, {"sliding_window": 64}),
    "glm": ("tiny-glm", {}, {"attention_bias": False}),
    "glm_full_rotary": ("tiny-glm", {"partial_rotary_factor": 1.0},
                        {"rope_parameters.partial_rotary_factor": None}),
    "glm4": ("tiny-glm4", {}, {"attention_bias": False}),
    "nemotron": ("tiny-nemotron", {}, {"attention_bias": False}),
    "nemotron_mlp_bias": ("tiny-nemotron", {}, {"mlp_bias": False}),
    "nemotron_full_rotary": ("tiny-nemotron", {"partial_rotary_factor": 1.0},
                             {"rope_parameters.partial_rotary_factor": None}),
    "falcon": ("tiny-falcon", {}, {"bias": False}),
    "falcon_one_norm": ("tiny-falcon", {"num_ln_in_parallel_attn": 1},
                        {"num_ln_in_parallel_attn": None}),
    "falcon_7b_multi_query": ("tiny-falcon", {"new_decoder_architecture": False, "bias": False,
                                              "tie_word_embeddings": False},
                              {"parallel_attn": False}),
    "falcon_multi_head_sequential": ("tiny-falcon", {"new_decoder_architecture": False,
                                                     "multi_query": False, "parallel_attn": False,
                                                     "num_kv_heads": 4},
                                     {"parallel_attn": True}),
    "exaone4": ("tiny-exaone4", {}, {"sliding_window": 64}),
    "exaone4_no_sliding_window": ("tiny-exaone4", {"sliding_window": None,
                                                   "layer_types": ["full_attention"] * 3}, None),
    "ernie4_5": ("tiny-ernie4_5", {}, {"use_bias": False}),
    "ernie4_5_untied": ("tiny-ernie4_5", {"tie_word_embeddings": False, "use_bias": False},
                        None),
    "seed_oss": ("tiny-seed_oss", {}, {"attention_out_bias": False}),
    "seed_oss_qkv_bias": ("tiny-seed_oss", {}, {"attention_bias": False}),
    "seed_oss_mlp_bias": ("tiny-seed_oss", {}, {"mlp_bias": False}),
    "hunyuan_v1_dense": ("tiny-hunyuan_v1_dense", {}, {"attention_bias": False}),
    "hunyuan_v1_dense_ntk_alpha": (
        "tiny-hunyuan_v1_dense", {"rope_parameters": {"rope_type": "dynamic", "alpha": 50.0,
                                                      "factor": 1.0, "rope_theta": 10000.0}},
        {"rope_parameters.alpha": None}),
    # gpt-oss (sinks random: every parameter is; sliding window 4 < the 10-token prompt)
    "gpt_oss": ("tiny-gpt_oss", {}, {"layer_types": ["full_attention"] * 2}),
    "gpt_oss_yarn": ("tiny-gpt_oss", {}, {"rope_parameters.rope_type": "default"}),
    "gpt_oss_swiglu_limit": ("tiny-gpt_oss", {"swiglu_limit": 0.3}, {"swiglu_limit": None}),
    "gpt_oss_swiglu_alpha": ("tiny-gpt_oss", {"swiglu_alpha": 0.5}, {"swiglu_alpha": None}),
    "gpt_oss_no_bias_top3": ("tiny-gpt_oss", {"attention_bias": False, "num_experts_per_tok": 3},
                             {"attention_bias": None}),
}

#: case -> the tensor its reverted config needs but the checkpoint lacks (a structural
#: switch: reverting it makes the build refuse the checkpoint instead of changing logits).
REVERT_NEEDS: dict[str, str] = {
    "stablelm_parallel_residual": "post_attention_layernorm",
    "falcon_one_norm": "ln_attn",
    "falcon_7b_multi_query": "post_attention_layernorm",
    "gpt_oss_no_bias_top3": "q_proj.bias",
}

#: (preset, overrides, expected message part): switch values a family rejects up front.
REJECTED: dict[str, tuple[str, dict, str]] = {
    "cohere2_zero_pattern": ("tiny-cohere2", {"layer_types": None, "sliding_window_pattern": 0},
                             "sliding_window_pattern 0"),
    "cohere2_null_window": ("tiny-cohere2", {"sliding_window": None},
                            "sliding_attention layers with sliding_window null"),
    "cohere_zero_logit_scale": ("tiny-cohere", {"logit_scale": 0.0}, "logit_scale 0"),
    "exaone4_bad_pattern": ("tiny-exaone4", {"layer_types": None, "sliding_window_pattern": "LXG"},
                            "sliding_window_pattern 'LXG'"),
    "hunyuan_bad_alpha": ("tiny-hunyuan_v1_dense",
                          {"rope_parameters": {"rope_type": "dynamic", "alpha": -1.0}},
                          "alpha must be a positive number"),
    "olmo_clip_qkv_type": ("tiny-olmo", {"clip_qkv": "yes"}, "'clip_qkv' must be float"),
    "falcon_alibi": ("tiny-falcon", {"alibi": True}, "falcon: alibi"),
    "falcon_sequential_new_architecture": ("tiny-falcon", {"parallel_attn": False},
                                           "new_decoder_architecture with parallel_attn false"),
    "gpt_oss_bad_limit": ("tiny-gpt_oss", {"swiglu_limit": 0.0}, "swiglu_limit must be > 0"),
    "falcon_two_norms_old_architecture": (
        "tiny-falcon", {"new_decoder_architecture": False, "num_ln_in_parallel_attn": 2},
        "num_ln_in_parallel_attn 2 without"),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}

    def get(case: str) -> str:
        if case not in made:
            preset, overrides, _ = CASES[case]
            folder = str(tmp_path_factory.mktemp(f"ckpt-{case}"))
            made[case] = random_checkpoint(folder, preset, **overrides)
        return made[case]

    return get


def _uses_fused_rotary(package) -> bool:
    return any(n.op_type == "GroupQueryAttention" and n.attributes.get("do_rotary") is not None
               and n.attributes["do_rotary"].value == 1 for n in package.models["model"].graph)


def _parity(folder, out, ep, *, pad, steps, hf_model=None):
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(out), overwrite=True)
    built = BuiltPackage(path, package.config, "f32")
    return f32_parity(built, hf_model or load_hf_model(folder), pad=pad, steps=steps), package


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_f32_parity_with_transformers(checkpoints, tmp_path, case, ep):
    folder = checkpoints(case)
    hf_model = load_hf_model(folder)
    run, package = _parity(folder, tmp_path / "a", ep, pad=3, steps=3, hf_model=hf_model)
    if _uses_fused_rotary(package):  # left-padded: prefill only; all steps unpadded
        run, _ = _parity(folder, tmp_path / "b", ep, pad=3, steps=0, hf_model=hf_model)
        unpadded, _ = _parity(folder, tmp_path / "c", ep, pad=0, steps=3, hf_model=hf_model)
        assert unpadded.max_abs_diff <= TOLERANCE, (
            f"{case}/{ep} unpadded: {unpadded.max_abs_diff:.3g}")
    assert run.max_abs_diff <= TOLERANCE, f"{case}/{ep}: max |logit diff| {run.max_abs_diff:.3g}"


SWITCH_CASES = sorted(c for c, (_, _, revert) in CASES.items() if revert)


@pytest.mark.parametrize("case", SWITCH_CASES)
def test_reverting_the_switch_changes_the_logits(checkpoints, tmp_path, case):
    folder = checkpoints(case)
    reverted = str(tmp_path / "reverted")
    shutil.copytree(folder, reverted)
    config_path = os.path.join(reverted, "config.json")
    with open(config_path) as f:
        raw = json.load(f)
    for path, value in CASES[case][2].items():  # "a.b": key b of the dict under a
        *parents, key = path.split(".")
        target = raw
        for parent in parents:
            target = target[parent]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    with open(config_path, "w") as f:
        json.dump(raw, f)
    if case in REVERT_NEEDS:
        with pytest.raises(WeightsError, match=REVERT_NEEDS[case]):
            build(reverted, dtype="f32")
        return
    hf_model = load_hf_model(folder)
    try:
        run, _ = _parity(reverted, tmp_path / "pkg", "default", pad=3, steps=3, hf_model=hf_model)
    except WeightsError as error:  # the reverted model leaves the switch's tensors unread
        assert "does not read" in str(error), error
        return
    assert run.max_abs_diff > CHANGED, (
        f"{case}: the switch changes nothing ({run.max_abs_diff:.3g})")


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_unsupported_switches_are_rejected_up_front(tmp_path, case):
    from mobius.tiny.presets import TINY_PRESETS

    preset, overrides, message = REJECTED[case]
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**TINY_PRESETS[preset], **overrides}))
    with pytest.raises(ConfigError, match=message):
        build(str(folder), dtype="f32")


def test_random_checkpoint_randomizes_every_parameter(tmp_path):
    """The premise of this file: no parameter keeps transformers' constant init."""
    folder = random_checkpoint(str(tmp_path / "ckpt"), "tiny-olmo")
    model = load_hf_model(folder)
    constant = [n for n, p in model.named_parameters() if p.numel() > 1
                and np.ptp(p.detach().numpy()) == 0]
    assert not constant, constant


@pytest.mark.parametrize("pattern", [2, 4])
def test_cohere2_sliding_window_pattern_gives_the_transformers_layer_types(pattern):
    """Older Cohere2 configs spell the layer types as sliding_window_pattern."""
    import transformers

    from mobius.models.cohere import normalize_cohere2

    raw = {"model_type": "cohere2", "num_hidden_layers": 6, "sliding_window_pattern": pattern}
    expected = transformers.Cohere2Config(num_hidden_layers=6,
                                          sliding_window_pattern=pattern).layer_types
    assert normalize_cohere2(raw)["layer_types"] == list(expected)


@pytest.mark.parametrize("pattern", [2, 4, "LLLG", "LG"])
def test_exaone4_sliding_window_pattern_gives_the_layer_types(pattern):
    """Configs without layer_types: an int pattern as transformers computes it; a
    string pattern (L local, G global) repeated over the layers."""
    import transformers

    from mobius.models.exaone4 import normalize_exaone4

    raw = {"model_type": "exaone4", "num_hidden_layers": 6, "sliding_window": 4,
           "sliding_window_pattern": pattern}
    if isinstance(pattern, int):
        expected = list(transformers.Exaone4Config(
            num_hidden_layers=6, sliding_window=4, sliding_window_pattern=pattern).layer_types)
    else:
        expected = ["sliding_attention" if pattern[i % len(pattern)] == "L" else
                    "full_attention" for i in range(6)]
    assert normalize_exaone4(raw)["layer_types"] == expected


HEAD_DIM_CASES = {  # model_type: config.json head_dim (absent or inconsistent)
    "ernie4_5": None, "glm": None, "glm4": None, "stablelm": 24, "cohere2": 24, "cohere": None,
    "nemotron": None, "exaone4": None, "olmo": None, "starcoder2": None, "seed_oss": None,
}  # (HunYuan: transformers itself needs head_dim in config.json)


@pytest.mark.parametrize("model_type", sorted(HEAD_DIM_CASES))
def test_head_dim_is_the_one_transformers_builds(model_type):
    """The head size transformers' attention really has (q_proj rows / heads), whether
    config.json names head_dim or not: some families default it (ERNIE, GLM: 128),
    one ignores it (StableLM: hidden_size / heads)."""
    import transformers

    from mobius.models.registry import family_for

    raw = {"model_type": model_type, "vocab_size": 300, "hidden_size": 64,
           "intermediate_size": 100, "num_hidden_layers": 1, "num_attention_heads": 4,
           "num_key_value_heads": 2, "pad_token_id": 0, "rope_theta": 10000.0}
    if HEAD_DIM_CASES[model_type] is not None:
        raw["head_dim"] = HEAD_DIM_CASES[model_type]
    hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**raw))
    expected = hf.model.layers[0].self_attn.q_proj.out_features // 4
    assert family_for(raw).make_config(raw).head_dim == expected
