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
from mobius.models import dense_families_cases as cases
from mobius.models.dense_families_cases import (HEAD_DIM_CASES, PARITY, REJECTED,
                                                REVERT_NEEDS, head_dim_config)
from testing import checkpoint_runs, decoder_reference
from testing.ep_parity import uses_fused_rotary
from testing.model_runs import BuiltPackage, f32_parity
from testing.reference_cases import case_dir

TOLERANCE = 1e-4
#: A reverted switch must move some logit by at least this much.
CHANGED = 1e-3

def _checkpoint(case: str) -> str:
    return checkpoint_runs.checkpoint(cases, case)


def _reference(case: str, run: str) -> decoder_reference.DecoderReference:
    """transformers' recorded run of ``case``: "padded" or "unpadded"."""
    return checkpoint_runs.reference(cases, case, run)


@pytest.fixture(scope="module")
def facts():
    with open(os.path.join(case_dir(cases, "transformers"), "facts.json")) as f:
        return json.load(f)


def _parity(folder, out, ep, reference, *, steps=3):
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(out), overwrite=True)
    built = BuiltPackage(path, package.config, "f32")
    return f32_parity(built, reference, steps=steps), package


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("case", sorted(PARITY))
def test_f32_parity_with_transformers(tmp_path, case, ep):
    folder, padded = _checkpoint(case), _reference(case, "padded")
    run, package = _parity(folder, tmp_path / "a", ep, padded)
    if uses_fused_rotary(package.model):  # left-padded: prefill only; all steps unpadded
        run = f32_parity(BuiltPackage(str(tmp_path / "a"), package.config, "f32"), padded,
                         steps=0)
        unpadded = f32_parity(BuiltPackage(str(tmp_path / "a"), package.config, "f32"),
                              _reference(case, "unpadded"))
        assert unpadded.max_abs_diff <= TOLERANCE, (
            f"{case}/{ep} unpadded: {unpadded.max_abs_diff:.3g}")
    assert run.max_abs_diff <= TOLERANCE, f"{case}/{ep}: max |logit diff| {run.max_abs_diff:.3g}"


SWITCH_CASES = sorted(c for c, (_, _, revert) in PARITY.items() if revert)


@pytest.mark.parametrize("case", SWITCH_CASES)
def test_reverting_the_switch_changes_the_logits(tmp_path, case):
    folder = _checkpoint(case)
    reverted = str(tmp_path / "reverted")
    shutil.copytree(folder, reverted, copy_function=shutil.copyfile)
    config_path = os.path.join(reverted, "config.json")
    with open(config_path) as f:
        raw = json.load(f)
    for path, value in PARITY[case][2].items():  # "a.b": key b of the dict under a
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
    try:
        run, _ = _parity(reverted, tmp_path / "pkg", "default", _reference(case, "padded"))
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


@pytest.mark.parametrize("case", ["olmo", "gpt_oss"])
def test_random_checkpoint_randomizes_every_parameter(case):
    """The premise of this file: no saved tensor keeps transformers' constant init."""
    from safetensors.numpy import load_file

    tensors = load_file(os.path.join(_checkpoint(case), "model.safetensors"))
    constant = [n for n, t in tensors.items() if t.size > 1 and np.ptp(t) == 0]
    assert not constant, constant


@pytest.mark.parametrize("pattern", cases.COHERE2_PATTERNS)
def test_cohere2_sliding_window_pattern_gives_the_transformers_layer_types(facts, pattern):
    """Older Cohere2 configs spell the layer types as sliding_window_pattern."""
    from mobius.models.cohere import normalize_cohere2

    raw = {"model_type": "cohere2", "num_hidden_layers": 6, "sliding_window_pattern": pattern}
    assert normalize_cohere2(raw)["layer_types"] == facts["cohere2_layer_types"][str(pattern)]


@pytest.mark.parametrize("pattern", [*cases.EXAONE4_PATTERNS, "LLLG", "LG"])
def test_exaone4_sliding_window_pattern_gives_the_layer_types(facts, pattern):
    """Configs without layer_types: an int pattern as transformers computes it; a
    string pattern (L local, G global) repeated over the layers."""
    from mobius.models.exaone4 import normalize_exaone4

    raw = {"model_type": "exaone4", "num_hidden_layers": 6, "sliding_window": 4,
           "sliding_window_pattern": pattern}
    if isinstance(pattern, int):
        expected = facts["exaone4_layer_types"][str(pattern)]
    else:
        expected = ["sliding_attention" if pattern[i % len(pattern)] == "L" else
                    "full_attention" for i in range(6)]
    assert normalize_exaone4(raw)["layer_types"] == expected


@pytest.mark.parametrize("name", sorted(cases.OLMO3_CONFIGS))
def test_olmo3_reads_rope_and_layer_types_as_transformers(facts, name):
    """Hub configs in the 4.x spelling: rope_scaling and rope_theta are the full-attention
    layers' (the sliding ones keep base 500000); no layer_types: every fourth layer full."""
    from mobius.models.registry import family_for

    raw = {"model_type": "olmo3", **cases.OLMO3_CONFIGS[name]}
    expected = facts["olmo3"][name]
    normalized = family_for(raw).normalize_raw(raw)
    assert normalized["layer_types"] == expected["layer_types"]
    assert normalized["rope_parameters"] == expected["rope_parameters"]


@pytest.mark.parametrize("model_type", sorted(HEAD_DIM_CASES))
def test_head_dim_is_the_one_transformers_builds(facts, model_type):
    """The head size transformers' attention really has (q_proj rows / heads), whether
    config.json names head_dim or not: some families default it (ERNIE, GLM: 128),
    one ignores it (StableLM: hidden_size / heads)."""
    from mobius.models.registry import family_for

    raw = head_dim_config(model_type)
    assert family_for(raw).make_config(raw).head_dim == facts["head_dim"][model_type]
