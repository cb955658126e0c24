"""L3: the three-model Qwen2.5-VL package vs transformers' Qwen2_5_VLForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-qwen2_5_vl preset plus
per-case overrides (testing/qwen2_5_vl_checkpoints.py). One batch of 2 prompts
with one 6 x 10-patch image each (row 1 left-padded by 3) runs through the
package as onnxruntime-genai chains it -- vision -> embedding -> decoder, then
3 decode steps feeding the greedy token through the embedding model (zero image
features) and present.* back as past_key_values.* -- and through transformers.
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

from testing.hf_checkpoints import load_hf_model, renamed_checkpoint
from testing.parity import compare_logits
from testing.qwen2_5_vl_checkpoints import make_qwen2_5_vl_checkpoint
from testing.qwen_vl_parity import PAD, build_and_load, hf_reference, make_inputs
from testing.vlm_sessions import assert_chain_matches

F32_TOLERANCE = 1e-4
GQA = "com.microsoft::GroupQueryAttention"

_VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 40, "num_heads": 2,
           "in_channels": 3, "patch_size": 4, "spatial_merge_size": 2,
           "temporal_patch_size": 2, "out_hidden_size": 64, "tokens_per_second": 4,
           "hidden_act": "silu", "model_type": "qwen2_5_vl_vision"}

# name: tiny-qwen2_5_vl overrides (each changes the output where the default would not)
CASES = {
    "default": {},  # M-RoPE sections 2/3/3, layer 1 full attention, 2 x 2 merged-token windows
    "sections_full_first_small_windows": {
        "vision_config": {**_VISION, "window_size": 8, "fullatt_block_indexes": [0]},
    },
    "tied": {"tie_word_embeddings": True},
}
_SECTIONS = [4, 2, 2]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            folder = str(tmp_path_factory.mktemp(name) / "ckpt")
            overrides = dict(CASES[name])
            if name == "sections_full_first_small_windows":
                from mobius.tiny.presets import TINY_PRESETS

                text = dict(TINY_PRESETS["tiny-qwen2_5_vl"]["text_config"])
                text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": _SECTIONS}
                overrides["text_config"] = text
            make_qwen2_5_vl_checkpoint(folder, **overrides)
            made[name] = folder, load_hf_model(folder)
        return made[name]

    return get


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_parity(name, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    pkg = build_and_load(folder, tmp_path / "pkg")
    inputs = make_inputs(hf_model)
    features, embeds, steps, tokens = pkg.generate(inputs)
    hf_features, hf_merged, hf_steps = hf_reference(hf_model, inputs, tokens)

    assert_chain_matches(pkg, inputs["input_ids"], inputs["attention_mask"],
                         (features, embeds, steps), (hf_features, hf_merged, hf_steps),
                         F32_TOLERANCE, name)


def test_cpu_build_matches_default_build_and_fuses_gqa_in_the_decoder_only(checkpoint, tmp_path):
    """cpu: GroupQueryAttention with M-RoPE applied before it (cos/sin are computed
    in the graph, so the kernel cannot rotate), fused norms; same tokens and logits."""
    folder, hf_model = checkpoint("default")
    default = build_and_load(folder, tmp_path / "default", "default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    layers = cpu.config.num_hidden_layers
    gqa = {key: [n for n in model.graph if f"{n.domain}::{n.op_type}" == GQA]
           for key, model in cpu.package.models.items()}
    assert {key: len(nodes) for key, nodes in gqa.items()} == {
        "vision": 0, "embedding": 0, "model": layers}
    assert all(n.attributes["do_rotary"].value == 0 for n in gqa["model"])
    for pad in (0, PAD):
        inputs = make_inputs(hf_model, seed=1, pad=pad)
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


def test_transformers_5_module_names_load_the_same_weights(checkpoint, tmp_path):
    folder, hf_model = checkpoint("default")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), _in_memory_layout,
                                 "visual.")  # what save_pretrained writes today
    inputs = make_inputs(hf_model)
    reference = build_and_load(folder, tmp_path / "a").generate(inputs, steps=1)
    other = build_and_load(renamed, tmp_path / "b").generate(inputs, steps=1)
    for a, b in zip(reference[:3], other[:3]):
        for x, y in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            np.testing.assert_array_equal(x, y)
