"""L3: the three-model Qwen 3.5 package (dense and MoE) vs transformers'
Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration, f32.

The Qwen-VL harness (testing/qwen_vl_parity.py) runs a left-padded batch of 2 prompts
with one 6 x 10-patch image each through the package as onnxruntime-genai chains it
(prefill + 3 cached decode steps on transformers' greedy tokens, the DeltaNet layers'
conv and recurrent states fed back by name) and through transformers (recorded at build
time: qwen3_5_vl_parity_cases.py). Compared, each to 1e-4: image_features vs
``get_image_features`` (Qwen3-VL's tower without deepstack), the merged embeddings, and
the logits of the prefill and every decode step.

The decoder's own switches are Qwen 3.5's text families' (qwen3_5_test.py,
qwen3_5_moe_test.py); the tower's are Qwen3-VL's (qwen3_vl_parity_test.py). The switch
this family adds, the interleaved M-RoPE sections over 3-D positions, has its case: the
same weights with the default sections must move the logits.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.models import qwen3_5_vl_parity_cases as cases
from testing.parity import compare_logits
from testing.qwen_vl_parity import build_and_load, load_case
from testing.reference_cases import case_dir
from testing.switch_checks import copy_case, edit_config
from testing.vlm_sessions import assert_chain_matches

F32_TOLERANCE = 1e-4


def _check(pkg, ref, label):
    features, embeds, steps, _ = pkg.replay(ref)
    assert_chain_matches(pkg, ref["input_ids"], ref["attention_mask"],
                         (features, embeds, steps), (ref["features"], ref["merged"], ref.logits),
                         F32_TOLERANCE, label)


@pytest.mark.parametrize("name,ep", [("dense", "default"), ("dense", "cpu"),
                                     ("moe", "default"), ("dense_sections", "default")])
def test_f32_parity(name, ep, tmp_path):
    folder, ref = load_case(case_dir(cases, name))
    _check(build_and_load(folder, tmp_path / "pkg", ep), ref, f"{name}/{ep}")


def test_sections_at_the_default_move_the_logits(tmp_path):
    folder, ref = load_case(case_dir(cases, "dense_sections"))
    reverted = copy_case(cases, "dense_sections", tmp_path / "reverted")
    text = cases.VARIANTS["dense_sections"][1]["text_config"]
    edit_config(reverted, {"text_config": {**text, "rope_parameters": {
        **text["rope_parameters"], "mrope_section": [2, 2, 2]}}})
    _, _, steps, _ = build_and_load(reverted, tmp_path / "rpkg").generate(ref)
    diff = compare_logits(steps[:1], ref.logits[:1], ref["attention_mask"])
    assert diff > 10 * F32_TOLERANCE, f"default sections move the logits by {diff:.3g}"
