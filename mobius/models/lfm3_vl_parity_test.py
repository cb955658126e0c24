"""L3: the three-model LFM3-VL package vs transformers' Lfm3VlForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-lfm3-vl preset plus per-case
overrides (lfm3_vl_parity_cases.py). The Qwen-VL harness (testing/qwen_vl_parity.py)
runs a left-padded batch of 2 prompts with one 6 x 10-patch image each (rows != columns,
so the short convolutions' raster reorder shows) through the package as the
vision -> embedding -> decoder chain (prefill + 3 cached decode steps on transformers'
greedy tokens: conv states and KV caches fed back) and through transformers (recorded at
build time). Compared, each to 1e-4: image_features vs ``get_image_features``, the
merged embeddings and the logits of the prefill (real positions) and every decode step,
for the default and the cpu EP. onnxruntime-genai cannot run the package (see
mobius/models/lfm3_vl.py), so there is no genai test.

Every switch the family reads has a case. Those that keep every tensor's shape
(REVERTIBLE) are rebuilt from the same weights with the switch at its default, which
must move the output past the tolerance; the others need tensors of other shapes.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import lfm3_vl_parity_cases as cases
from mobius.models.lfm3_vl_parity_cases import PRESET, VISION
from testing.parity import compare_logits
from testing.qwen_vl_parity import build_and_load, load_case
from testing.reference_cases import case_dir
from testing.vlm_sessions import assert_chain_matches

F32_TOLERANCE = 1e-4
GQA = "com.microsoft::GroupQueryAttention"
#: cases whose switch keeps every tensor's shape: (section or None, the default values)
REVERTIBLE = {"projector_relu": (None, {"projector_hidden_act": "gelu"}),
              "vision_theta": ("vision_config", {"rope_parameters": VISION["rope_parameters"]}),
              "vision_eps": ("vision_config", {"norm_eps": VISION["norm_eps"]})}
#: config edits the family refuses: (edit of tiny-lfm3-vl, error, words of the message)
REJECTED = (
    ({"text_config": {"model_type": "lfm2"}}, UnsupportedModelError, "supported: lfm3"),
    ({"vision_config": {"model_type": "siglip2_vision_model"}}, UnsupportedModelError,
     "lfm3_vl_vision"),
    ({"image_token_id": 5000}, ConfigError, "outside the vocabulary"),
    ({"vision_start_token_id": -1}, ConfigError, "outside the vocabulary"),
    ({"vision_config": {**VISION, "conv_kernel_size": 4}}, ConfigError, "must be odd"),
    ({"vision_config": {**VISION, "num_key_value_heads": 3}}, ConfigError,
     "num_key_value_heads"),
    ({"vision_config": {**VISION, "layer_types": ["conv", "sliding_attention", "conv"]}},
     ConfigError, "layer_types"),
    ({"vision_config": {**VISION, "rope_parameters": {"rope_type": "default"}}}, ConfigError,
     "supported: axial"),
)


def _check(pkg, ref, label, prefill_only=False):
    """The chain on a recording's batch and transformers' tokens (``prefill_only``: no
    decode step) vs the recording."""
    tokens = ref.tokens[:0] if prefill_only else ref.tokens
    features, embeds, steps, _ = pkg.generate(ref, len(tokens), tokens)
    assert_chain_matches(pkg, ref["input_ids"], ref["attention_mask"],
                         (features, embeds, steps),
                         (ref["features"], ref["merged"], ref.logits[:len(steps)]),
                         F32_TOLERANCE, label)


def _reverted(folder, name, out):
    shutil.copytree(folder, out, copy_function=shutil.copyfile)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    section, default = REVERTIBLE[name]
    target = config if section is None else config[section]
    target.update(default)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f)
    return out


@pytest.mark.parametrize("name", cases.CASES)
def test_f32_parity(name, tmp_path):
    folder, ref = load_case(case_dir(cases, name))
    _check(build_and_load(folder, tmp_path / "pkg"), ref, name)
    if name in REVERTIBLE:
        reverted = _reverted(folder, name, str(tmp_path / "reverted"))
        features, _, steps, _ = build_and_load(reverted, tmp_path / "rpkg").generate(ref)
        diff = max(compare_logits(steps[:1], ref.logits[:1], ref["attention_mask"]),
                   float(np.abs(features - ref["features"]).max()))
        assert diff > 10 * F32_TOLERANCE, f"{name} at its default moves the output by {diff:.3g}"


def test_cpu_build_matches_transformers(tmp_path):
    """cpu: GroupQueryAttention in the decoder's attention layers only (the tower's
    bidirectional attention stays plain); same parity: an unpadded batch over every step,
    a left-padded one over the prefill (ORT's GQA kernel rotates a left-padded row's
    decode steps by cache slot, as for text-only LFM2: lfm2_families_test.py)."""
    folder = load_case(case_dir(cases, "default"))[0]
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    gqa = {key: sum(f"{n.domain}::{n.op_type}" == GQA for n in model.graph)
           for key, model in cpu.package.models.items()}
    assert gqa == {"vision": 0, "embedding": 0, "model": 2}  # sliding + full
    for seed, pad in cases.CPU_RUNS:
        _check(cpu, load_case(case_dir(cases, "default"), seed, pad)[1], f"cpu pad {pad}",
               prefill_only=pad > 0)


@pytest.mark.parametrize("edit, error, words", REJECTED)
def test_refused_configs(edit, error, words):
    from mobius.models.lfm3_vl import FAMILY, Lfm3VlForConditionalGeneration

    with pytest.raises(error, match=words):
        Lfm3VlForConditionalGeneration(FAMILY.make_config({**PRESET, **edit}))
