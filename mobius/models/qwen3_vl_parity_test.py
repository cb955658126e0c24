"""L3: the three-model Qwen3-VL package vs transformers' Qwen3VLForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-qwen3_vl preset plus
per-case overrides. The harness (testing/qwen_vl_parity.py) runs a left-padded
batch of 2 prompts with one 6 x 10-patch image each through the package as
onnxruntime-genai chains it (prefill + 3 cached decode steps on transformers' greedy
tokens) and through transformers (recorded at build time: qwen3_vl_parity_cases.py).
Compared, each to 1e-4: image_features vs ``get_image_features`` (merger output, then the deepstack features in layer order), the merged
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

import copy
import json
import os
import shutil

import numpy as np
import pytest

from mobius.models import qwen3_vl_parity_cases as cases
from mobius.models.qwen3_vl_parity_cases import OVERRIDES, TEXT, VISION
from testing.parity import compare_logits
from testing.qwen_vl_parity import build_and_load, load_case
from testing.reference_cases import case_dir
from testing.vlm_sessions import assert_chain_matches

F32_TOLERANCE = 1e-4
GQA = "com.microsoft::GroupQueryAttention"
#: cases whose switch keeps every tensor's shape: config.json back at the default
#: must change the logits
REVERTIBLE = {"deepstack_unordered": ("vision_config", VISION),
              "sections": ("text_config", TEXT),
              "vision_silu": ("vision_config", VISION),
              "vision_theta": ("vision_config", {**VISION, "rope_parameters": {
                  "rope_type": "axial", "rope_theta": 10000.0}})}


def _check(pkg, ref, label):
    features, embeds, steps, _ = pkg.replay(ref)
    assert_chain_matches(pkg, ref["input_ids"], ref["attention_mask"],
                         (features, embeds, steps), (ref["features"], ref["merged"], ref.logits),
                         F32_TOLERANCE, label)


@pytest.mark.parametrize("name", cases.CASES)
def test_f32_parity(name, tmp_path):
    folder, ref = load_case(case_dir(cases, name))
    _check(build_and_load(folder, tmp_path / "pkg"), ref, name)
    if name in REVERTIBLE:
        section, default = REVERTIBLE[name]
        reverted = str(tmp_path / "reverted")
        shutil.copytree(folder, reverted, copy_function=shutil.copyfile)
        with open(os.path.join(reverted, "config.json")) as f:
            config = json.load(f)
        # a copy: the rope_theta edit below must not reach the shared preset
        config[section] = {**config[section],
                           **copy.deepcopy({k: default[k] for k in OVERRIDES[name][section]})}
        if name == "sections":  # only the sections go back
            config[section]["rope_parameters"]["rope_theta"] = 10.0
        with open(os.path.join(reverted, "config.json"), "w") as f:
            json.dump(config, f)
        features, _, steps, _ = build_and_load(reverted, tmp_path / "rpkg").generate(ref)
        diff = max(compare_logits(steps[:1], ref.logits[:1], ref["attention_mask"]),
                   float(np.abs(features - ref["features"]).max()))
        assert diff > 10 * F32_TOLERANCE, f"{name} at its default moves the output by {diff:.3g}"


def test_cpu_build_matches_transformers_and_fuses_gqa_in_the_decoder_only(tmp_path):
    """cpu: GroupQueryAttention (M-RoPE applied before it), fused norms; same logits."""
    folder = load_case(case_dir(cases, "default"))[0]
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    gqa = {key: [n for n in model.graph if f"{n.domain}::{n.op_type}" == GQA]
           for key, model in cpu.package.models.items()}
    assert {key: len(nodes) for key, nodes in gqa.items()} == {
        "vision": 0, "embedding": 0, "model": cpu.config.num_hidden_layers}
    for seed, pad in cases.CPU_RUNS:
        _check(cpu, load_case(case_dir(cases, "default"), seed, pad)[1], f"cpu pad {pad}")
