"""ModernBERT (mobius/models/modernbert.py, modernbert_heads.py): every config switch the
family reads keeps f32 parity with transformers where it matters, the hub spelling
(global_attn_every_n_layers, global/local_rope_theta, no layer_types) reads as
transformers 5's, and bad values are one-line errors. The tiny presets at sequence 9
(window 2 either side): encoder_parity_test.py."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from mobius import build
from mobius.errors import ConfigError
from mobius.models import modernbert, modernbert_heads
from mobius.tiny.bases import VOCAB_SIZE
from testing.encoder_runs import encoder_parity, run_reference
from testing.model_runs import build_package, make_family_checkpoint, ort_session

SEQ_CLS, TOK_CLS, MLM = modernbert_heads.FAMILIES
#: weights 10x transformers' init scale: attention logits O(1) instead of ~0.01, so that
#: RoPE bases and windows change the output by far more than the parity tolerance
SHARP = {"initializer_range": 0.2}
#: (family, overrides): each case turns on switches the tiny preset leaves at their defaults
SWITCHES = {
    "biases": (modernbert.FAMILY, {"attention_bias": True, "mlp_bias": True, "norm_bias": True}),
    "mean_pooling_head_bias_silu": (SEQ_CLS, {"classifier_pooling": "mean", "classifier_bias": True,
                                              "classifier_activation": "silu"}),
    "token_head_bias": (TOK_CLS, {"classifier_bias": True, "norm_bias": True}),
    "untied_no_decoder_bias": (MLM, {"tie_word_embeddings": False, "decoder_bias": False}),
}


def _parity(folder, tmp_path):
    built = build_package(folder, tmp_path / "onnx")
    return encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), folder,
                          built.config)


@pytest.mark.parametrize("case", sorted(SWITCHES))
def test_switch_parity(case, tmp_path):
    family, overrides = SWITCHES[case]
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), family, **SHARP, **overrides)
    run = _parity(folder, tmp_path)
    assert max(run.diffs.values()) <= 1e-4, f"{case}: {run.diffs}"


def _respelled(folder: str, out: str, **changes) -> str:
    """A copy of ``folder`` whose config.json has ``changes`` (None: key removed)."""
    shutil.copytree(folder, out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        raw = json.load(f)
    for key, value in changes.items():
        raw.pop(key, None) if value is None else raw.__setitem__(key, value)
    with open(path, "w") as f:
        json.dump(raw, f)
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("modernbert")
    return make_family_checkpoint(str(root / "ckpt"), modernbert.FAMILY, **SHARP)


#: hub configs: no layer_types / rope_parameters; each value differs from the default
HUB = {"layer_types": None, "rope_parameters": None}
HUB_VALUES = {"global_attn_every_n_layers": 3, "local_rope_theta": 500.0,
              "global_rope_theta": 40.0, "local_attention": 8}


@pytest.mark.parametrize("changed", [False, True], ids=["defaults", "every_value_changed"])
def test_hub_spelling_parity(changed, base, tmp_path):
    folder = _respelled(base, str(tmp_path / "hub"), **HUB, **(HUB_VALUES if changed else {}))
    run = _parity(folder, tmp_path)
    assert run.diffs["last_hidden_state"] <= 1e-4, run.diffs


@pytest.mark.parametrize("key", sorted(HUB_VALUES))
def test_each_hub_value_moves_the_output(key, base, tmp_path):
    """Each value of the changed case alone moves transformers' output far beyond the
    parity tolerance, so a build that ignored it would fail test_hub_spelling_parity."""
    folder = _respelled(base, str(tmp_path / "hub"), **HUB, **{key: HUB_VALUES[key]})
    mask = np.ones((2, 9), np.int64)
    mask[1, 6:] = 0
    ids = np.random.default_rng(0).integers(4, VOCAB_SIZE, size=(2, 9)) * mask
    feeds = {"input_ids": ids, "attention_mask": mask}
    real = mask > 0
    before, after = (run_reference(f, feeds, ["last_hidden_state"])["last_hidden_state"]
                     for f in (base, folder))
    assert np.abs(before - after)[real].max() > 1e-2, key


@pytest.mark.parametrize("changes,match", [
    ({"classifier_pooling": "max"}, "'cls' or 'mean'"),
    ({"local_attention": 0}, "local_attention"),
    ({"layer_types": ["full_attention", "chunked_attention", "full_attention"]}, "layer_types"),
    ({"norm_bias": "yes"}, "norm_bias"),
])
def test_bad_values_are_one_line_errors(changes, match, base, tmp_path):
    folder = _respelled(base, str(tmp_path / "bad"), **changes)
    with pytest.raises(ConfigError, match=match):
        build(folder)
