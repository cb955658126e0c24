"""L3: the three-model Qwen2.5-VL package vs transformers' Qwen2_5_VLForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-qwen2_5_vl preset plus
per-case overrides (testing/qwen2_5_vl_checkpoints.py). One batch of 2 prompts
with one 6 x 10-patch image each (row 1 left-padded by 3) runs through the
package as onnxruntime-genai chains it -- vision -> embedding -> decoder, then
3 decode steps feeding transformers' greedy token through the embedding model (zero
image features) and present.* back as past_key_values.* -- and through transformers
(recorded at build time: qwen2_5_vl_parity_cases.py).
The prefill's 3-D position ids are transformers' own (``get_rope_index``: text,
then the image's (t, h, w) grid, then text resuming after the grid's largest
side); each decode step continues every stream at the row's last position + 1.
Compared, each to 1e-4: image_features vs ``get_image_features`` (window and
full-attention layers, 2-D rotary, merger), the merged embeddings, and the
logits of the prefill (real positions) and every decode step.
"""

from __future__ import annotations

import numpy as np
import pytest

from mobius.models import qwen2_5_vl_parity_cases as cases
from testing.hf_checkpoints import renamed_checkpoint
from testing.parity import compare_logits
from testing.qwen_vl_parity import build_and_load, load_case
from testing.reference_cases import case_dir
from testing.vlm_sessions import assert_chain_matches

F32_TOLERANCE = 1e-4
GQA = "com.microsoft::GroupQueryAttention"


@pytest.mark.parametrize("name", cases.CASES)
def test_f32_parity(name, tmp_path):
    folder, ref = load_case(case_dir(cases, name))
    pkg = build_and_load(folder, tmp_path / "pkg")
    features, embeds, steps, _ = pkg.replay(ref)
    assert_chain_matches(pkg, ref["input_ids"], ref["attention_mask"],
                         (features, embeds, steps), (ref["features"], ref["merged"], ref.logits),
                         F32_TOLERANCE, name)


def test_cpu_build_matches_default_build_and_fuses_gqa_in_the_decoder_only(tmp_path):
    """cpu: GroupQueryAttention with M-RoPE applied before it (cos/sin are computed
    in the graph, so the kernel cannot rotate), fused norms; same tokens and logits."""
    folder = load_case(case_dir(cases, "default"))[0]
    default = build_and_load(folder, tmp_path / "default", "default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    layers = cpu.config.num_hidden_layers
    gqa = {key: [n for n in model.graph if f"{n.domain}::{n.op_type}" == GQA]
           for key, model in cpu.package.models.items()}
    assert {key: len(nodes) for key, nodes in gqa.items()} == {
        "vision": 0, "embedding": 0, "model": layers}
    assert all(n.attributes["do_rotary"].value == 0 for n in gqa["model"])
    for seed, pad in cases.CPU_RUNS:
        inputs = load_case(case_dir(cases, "default"), seed, pad)[1]
        ref_features, ref_embeds, ref_logits, tokens = default.generate(inputs)
        features, embeds, logits, cpu_tokens = cpu.generate(inputs)
        assert float(np.abs(features - ref_features).max()) <= F32_TOLERANCE
        assert float(np.abs(embeds - ref_embeds).max()) <= F32_TOLERANCE
        assert [t.tolist() for t in cpu_tokens] == [t.tolist() for t in tokens]
        diff = compare_logits(logits, ref_logits, inputs["attention_mask"])
        assert diff <= F32_TOLERANCE, f"pad {pad}: {diff:.3g}"


def _in_memory_layout(name: str) -> str:  # transformers 5's module names
    for old, new in (("model.", "model.language_model."), ("visual.", "model.visual.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


def test_transformers_5_module_names_load_the_same_weights(tmp_path):
    folder, inputs = load_case(case_dir(cases, "default"))
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), _in_memory_layout,
                                 "visual.")  # what save_pretrained writes today
    reference = build_and_load(folder, tmp_path / "a").generate(inputs, steps=1)
    other = build_and_load(renamed, tmp_path / "b").generate(inputs, steps=1)
    for a, b in zip(reference[:3], other[:3]):
        for x, y in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            np.testing.assert_array_equal(x, y)
