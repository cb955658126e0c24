"""L3: the three-model Qwen3-VL package vs transformers' Qwen3VLForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-qwen3_vl preset plus
per-case overrides. The harness (testing/qwen_vl_parity.py) runs a left-padded
batch of 2 prompts with one 6 x 10-patch image each through the package as
onnxruntime-genai chains it (prefill + 3 cached decode steps) and through
transformers. Compared, each to 1e-4: image_features vs ``get_image_features``
(merger output, then the deepstack features in layer order), the merged
embeddings (the deepstack chunks hold those features at image tokens, zeros
elsewhere), and the logits of the prefill (real positions) and every decode
step -- for the default and the cpu EP.

Every switch the family reads has a case: the deepstack layers (how many,
their order, none), mrope_section, attention_bias, the learned position
grid's size, the vision activation and rotary base, and tie_word_embeddings.
Switches that leave the tensors' shapes alone are also rebuilt from the same
weights with the switch at its default, which must move the image features or
the prefill logits past the tolerance.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from mobius.tiny.presets import TINY_PRESETS
from testing.hf_checkpoints import checkpoint_cases
from testing.parity import compare_logits
from testing.qwen2_5_vl_checkpoints import make_qwen2_5_vl_checkpoint
from testing.qwen_vl_parity import PAD, build_and_load, hf_reference, make_inputs
from testing.vlm_sessions import assert_chain_matches

F32_TOLERANCE = 1e-4
GQA = "com.microsoft::GroupQueryAttention"
PRESET = TINY_PRESETS["tiny-qwen3_vl"]
TEXT, VISION = PRESET["text_config"], PRESET["vision_config"]


def _vision(**changes):
    return {"vision_config": {**VISION, **changes}}


def _text(**changes):
    return {"text_config": {**TEXT, **changes}}


# name: tiny-qwen3_vl overrides (each changes the output where the default would not)
CASES = {
    "default": {},  # deepstack after vision layers 0 and 2, sections 2/3/3, 4 x 4 grid
    "deepstack_one": _vision(deepstack_visual_indexes=[1]),
    "deepstack_unordered": _vision(deepstack_visual_indexes=[2, 0]),
    "no_deepstack": _vision(deepstack_visual_indexes=[]),
    # frequencies 4, 5 and 7 read the temporal stream; a low theta makes them matter
    "sections": _text(rope_parameters={**TEXT["rope_parameters"], "mrope_section": [6, 1, 1],
                                       "rope_theta": 10.0}),
    "attention_bias": _text(attention_bias=True),
    "position_grid_6": _vision(num_position_embeddings=36),
    "vision_silu": _vision(hidden_act="silu"),
    "vision_theta": _vision(rope_parameters={"rope_type": "axial", "rope_theta": 2.0}),
    "tied": {"tie_word_embeddings": True},
}
#: cases whose switch keeps every tensor's shape: config.json back at the default
#: must change the logits
REVERTIBLE = {"deepstack_unordered": ("vision_config", VISION),
              "sections": ("text_config", TEXT),
              "vision_silu": ("vision_config", VISION),
              "vision_theta": ("vision_config", {**VISION, "rope_parameters": {
                  "rope_type": "axial", "rope_theta": 10000.0}})}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    def make(folder, name):
        make_qwen2_5_vl_checkpoint(folder, preset="tiny-qwen3_vl", **CASES[name])

    return checkpoint_cases(tmp_path_factory, make)


def _check(pkg, hf_model, inputs, label):
    features, embeds, steps, tokens = pkg.generate(inputs)
    hf_features, hf_merged, hf_steps = hf_reference(hf_model, inputs, tokens)
    assert_chain_matches(pkg, inputs["input_ids"], inputs["attention_mask"],
                         (features, embeds, steps), (hf_features, hf_merged, hf_steps),
                         F32_TOLERANCE, label)
    return hf_features, hf_steps


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_parity(name, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    inputs = make_inputs(hf_model)
    hf_features, hf_steps = _check(build_and_load(folder, tmp_path / "pkg"), hf_model, inputs,
                                   name)
    if name in REVERTIBLE:
        section, default = REVERTIBLE[name]
        reverted = str(tmp_path / "reverted")
        shutil.copytree(folder, reverted)
        with open(os.path.join(reverted, "config.json")) as f:
            config = json.load(f)
        config[section] = {**config[section], **{k: default[k] for k in CASES[name][section]}}
        if name == "sections":  # only the sections go back
            config[section]["rope_parameters"]["rope_theta"] = 10.0
        with open(os.path.join(reverted, "config.json"), "w") as f:
            json.dump(config, f)
        features, _, steps, _ = build_and_load(reverted, tmp_path / "rpkg").generate(inputs)
        diff = max(compare_logits(steps[:1], hf_steps[:1], inputs["attention_mask"]),
                   float(np.abs(features - hf_features).max()))
        assert diff > 10 * F32_TOLERANCE, f"{name} at its default moves the output by {diff:.3g}"


def test_cpu_build_matches_transformers_and_fuses_gqa_in_the_decoder_only(checkpoint, tmp_path):
    """cpu: GroupQueryAttention (M-RoPE applied before it), fused norms; same logits."""
    folder, hf_model = checkpoint("default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    gqa = {key: [n for n in model.graph if f"{n.domain}::{n.op_type}" == GQA]
           for key, model in cpu.package.models.items()}
    assert {key: len(nodes) for key, nodes in gqa.items()} == {
        "vision": 0, "embedding": 0, "model": cpu.config.num_hidden_layers}
    for pad in (0, PAD):
        _check(cpu, hf_model, make_inputs(hf_model, seed=1, pad=pad), f"cpu pad {pad}")
