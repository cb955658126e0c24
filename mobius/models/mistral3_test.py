"""L1: the Mistral 3 family (task image-text-to-text, three models) builds for every
built-in EP and every dtype it accepts (MLX rejects the task up front), each saved
model passes the full ONNX checker, and the graph I/O + genai_config are genai's
mistral3 contract: vision takes pixel_values [num_images, 3, image_height,
image_width] (any size: genai runs it once per image), patch_size and
spatial_merge_size in the vision section, the Pixtral processor config.

Also: sparse config.json sections get transformers' defaults, and the errors for
what the family does not support. Uses mobius' numpy tiny checkpoint (no torch);
parity with transformers is mistral3_parity_test.py.
"""

from __future__ import annotations

import pytest

from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models.mistral3 import FAMILY, Mistral3ForConditionalGeneration, normalize_mistral3
from mobius.models.registry import family_for
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_builds

PRESET = TINY_PRESETS["tiny-mistral3"]
TEXT, VISION = PRESET["text_config"], PRESET["vision_config"]


def _inputs(graph) -> dict:
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in graph.input}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return make_tiny_checkpoint("tiny-mistral3", str(tmp_path_factory.mktemp("tiny") / "m3"))


@vlm_builds.every_ep_and_dtype
def test_builds_for_every_ep_and_dtype(ep, dtype, checkpoint, tmp_path):
    if vlm_builds.rejection(FAMILY, checkpoint, ep, dtype) is not None:
        return
    saved = vlm_builds.build_checked(checkpoint, ep, dtype, tmp_path)
    graphs = saved.graphs
    assert _inputs(graphs["vision"]) == {
        "pixel_values": ["num_images", 3, "image_height", "image_width"]}
    assert [o.name for o in graphs["vision"].output] == ["image_features"]
    decoder = _inputs(graphs["model"])
    assert "input_ids" not in decoder and "inputs_embeds" in decoder

    model = saved.genai_model
    assert model["type"] == "mistral3"
    assert model["image_token_id"] == PRESET["image_token_index"]
    assert model["vision"]["inputs"] == {"pixel_values": "pixel_values"}
    assert (model["vision"]["patch_size"], model["vision"]["spatial_merge_size"]) == (
        VISION["patch_size"], PRESET["spatial_merge_size"])
    processor = saved.processor
    steps = [t["operation"]["type"] for t in processor["transforms"]]
    assert steps[-2:] == ["Permute3D", "PixtralImageSizes"]  # what genai's processor requires


def _module(config):
    import onnx_ir as ir

    from mobius.context import build_context

    with build_context(None, ir.DataType.FLOAT):
        return Mistral3ForConditionalGeneration(config)


def test_registry_finds_the_family():
    assert family_for(PRESET) is FAMILY
    assert family_for({"architectures": ["Mistral3ForConditionalGeneration"]}) is FAMILY


def test_sparse_sections_get_transformers_defaults():
    """Mistral3Config fills text / vision values a config.json leaves out, and ties the head
    by the top-level flag (default true)."""
    raw = {"model_type": "mistral3", "text_config": {"vocab_size": 500},
           "vision_config": {"hidden_size": 64, "num_attention_heads": 4}}
    out = normalize_mistral3(raw)
    assert (out["hidden_size"], out["head_dim"], out["rope_theta"]) == (5120, 128, 1e9)
    assert out["vision_config"]["patch_size"] == 14
    assert out["vision_config"]["rope_parameters"]["rope_theta"] == 10000.0
    listed = normalize_mistral3({**raw, "vision_config": {"image_size": [1024, 1540]}})
    assert listed["vision_config"]["image_size"] == 1540
    assert out["tie_word_embeddings"] is True and out["spatial_merge_size"] == 2
    assert normalize_mistral3(out) == out  # idempotent


@pytest.mark.parametrize("overrides,error,match", [
    ({"text_config": {**TEXT, "model_type": "ministral3"}}, UnsupportedModelError, "ministral3"),
    ({"vision_config": {**VISION, "model_type": "siglip_vision_model"}},
     UnsupportedModelError, "siglip"),
    ({"vision_config": {**VISION, "rope_parameters": {"rope_type": "default"}}},
     UnsupportedModelError, "axial"),
    ({"vision_config": {**VISION, "num_attention_heads": 8}}, ConfigError, "multiple of 4"),
    ({"vision_feature_layer": [0, -1]}, ConfigError, "several layers"),
    ({"vision_feature_layer": 3}, ConfigError, "out of range"),
    ({"spatial_merge_size": 0}, ConfigError, "spatial_merge_size"),
    ({"vision_config": {**VISION, "rope_parameters": {"rope_type": "axial", "rope_theta": "1e4"}}},
     ConfigError, "rope_theta"),
    ({"image_token_index": TEXT["vocab_size"]}, ConfigError, "image_token_index"),
])
def test_unsupported_configs_fail_clearly(overrides, error, match):
    with pytest.raises(error, match=match):
        _module(FAMILY.make_config({**PRESET, **overrides}))


@pytest.mark.parametrize("preprocessor, match", [
    ({"size": {"longest_edge": 128}}, "longest_edge 128 exceeds the vision tower's image_size 64"),
    ({"do_normalize": False}, "do_normalize=False is not supported"),
    ({"image_mean": "clip"}, "image_mean must be 3 numbers"),
])
def test_processor_settings_genai_cannot_honour_fail_clearly(preprocessor, match):
    with pytest.raises(ConfigError, match=match):
        _module(FAMILY.make_config(PRESET)).genai_processor_files(preprocessor)
