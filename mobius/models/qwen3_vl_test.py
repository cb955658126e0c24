"""L1: the Qwen3-VL family (task image-text-to-text, three models) builds for
every built-in EP and every dtype it accepts (MLX rejects the task up front),
each saved model passes the full ONNX checker, and the graph I/O + genai_config
are genai's qwen3_vl contract with the deepstack features beside the
embeddings: image_features and inputs_embeds are hidden * (1 + deepstack
layers) wide, and so is genai_config's decoder hidden_size (genai sizes both
buffers by it). Also the errors for what the family does not support. Uses
mobius' numpy tiny checkpoint (no torch); parity with transformers is
qwen3_vl_parity_test.py.
"""

from __future__ import annotations

import pytest

from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models.qwen3_vl import FAMILY, Qwen3VLForConditionalGeneration, normalize_qwen3_vl
from mobius.models.registry import family_for
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_builds

PRESET = TINY_PRESETS["tiny-qwen3_vl"]
TEXT, VISION = PRESET["text_config"], PRESET["vision_config"]
PATCH_DIM = 3 * 2 * 4 * 4  # channels * temporal_patch_size * patch_size^2
WIDTH = TEXT["hidden_size"] * (1 + len(VISION["deepstack_visual_indexes"]))


def _io(values) -> dict:
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in values}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return make_tiny_checkpoint("tiny-qwen3_vl", str(tmp_path_factory.mktemp("tiny") / "q3vl"))


@vlm_builds.every_ep_and_dtype
def test_builds_for_every_ep_and_dtype(ep, dtype, checkpoint, tmp_path):
    if vlm_builds.rejection(FAMILY, checkpoint, ep, dtype) is not None:
        return
    saved = vlm_builds.build_checked(checkpoint, ep, dtype, tmp_path)
    graphs = saved.graphs
    assert _io(graphs["vision"].input) == {"pixel_values": ["num_patches", PATCH_DIM],
                                           "image_grid_thw": ["num_images", 3]}
    assert _io(graphs["vision"].output) == {"image_features": ["num_image_tokens", WIDTH]}
    assert _io(graphs["embedding"].output) == {
        "inputs_embeds": ["batch_size", "sequence_length", WIDTH]}
    decoder = _io(graphs["model"].input)
    assert decoder["inputs_embeds"] == ["batch_size", "sequence_length", WIDTH]
    assert decoder["position_ids"] == [3, "batch_size", "sequence_length"]

    model = saved.genai_model
    assert model["type"] == "qwen3_vl"
    assert model["decoder"]["hidden_size"] == WIDTH
    assert (model["image_token_id"], model["video_token_id"], model["vision_start_token_id"]) == (
        PRESET["image_token_id"], PRESET["video_token_id"], PRESET["vision_start_token_id"])
    assert {k: model["vision"][k] for k in ("spatial_merge_size", "patch_size")} == {
        k: VISION[k] for k in ("spatial_merge_size", "patch_size")}
    processor = saved.processor
    assert processor["name"] == "qwen3_vl_image_processor"
    assert processor["transforms"][-1]["operation"]["attrs"]["patch_size"] == VISION["patch_size"]


def _module(config):
    import onnx_ir as ir

    from mobius.context import build_context

    with build_context(None, ir.DataType.FLOAT):
        return Qwen3VLForConditionalGeneration(config)


def test_registry_finds_the_family():
    assert family_for(PRESET) is FAMILY
    assert family_for({"architectures": ["Qwen3VLForConditionalGeneration"]}) is FAMILY


def test_defaults_fill_a_sparse_config():
    """transformers' defaults: the vision tower's, and mrope_section 24/20/20."""
    raw = {**PRESET, "vision_config": {"out_hidden_size": 64},
           "text_config": {**TEXT, "rope_parameters": {"rope_type": "default",
                                                       "rope_theta": 1e4}}}
    normalized = normalize_qwen3_vl(raw)
    vision = normalized["vision_config"]
    assert (vision["depth"], vision["hidden_size"], vision["num_position_embeddings"]) == (
        27, 1152, 2304)
    assert vision["deepstack_visual_indexes"] == [8, 16, 24]
    assert normalized["mrope_section"] == [24, 20, 20]
    assert normalize_qwen3_vl(normalized) == normalized  # idempotent


_ROPE = TEXT["rope_parameters"]


@pytest.mark.parametrize("overrides,error,match", [
    ({"text_config": {**TEXT, "rope_parameters": {**_ROPE, "mrope_section": [2, 3, 4]}}},
     ConfigError, "mrope_section"),
    ({"text_config": {**TEXT, "rope_parameters": {**_ROPE, "rope_type": "yarn"}}},
     UnsupportedModelError, "yarn"),
    ({"vision_config": {**VISION, "deepstack_visual_indexes": [3]}}, ConfigError, "deepstack"),
    ({"vision_config": {**VISION, "deepstack_visual_indexes": [0, 0]}}, ConfigError, "deepstack"),
    ({"vision_config": {**VISION, "deepstack_visual_indexes": [0, 1, 2]}}, ConfigError,
     "3 deepstack_visual_indexes for 2 decoder layers"),
    ({"vision_config": {**VISION, "num_position_embeddings": 15}}, ConfigError, "square"),
    ({"vision_config": {**VISION, "num_heads": 16}}, ConfigError, "multiple of 4"),
    ({"vision_config": {**VISION, "out_hidden_size": 48}}, ConfigError, "out_hidden_size"),
    ({"image_token_id": TEXT["vocab_size"]}, ConfigError, "image_token_id"),
])
def test_unsupported_configs_fail_clearly(overrides, error, match):
    with pytest.raises(error, match=match):
        _module(FAMILY.make_config({**PRESET, **overrides}))


def test_transformers_4_57_layout_reads_the_same():
    """Qwen/Qwen3-VL-*-Instruct's config.json (transformers 4.57): ``rope_scaling`` with
    mrope_interleaved, rope_theta beside it in text_config."""
    text = {k: v for k, v in TEXT.items() if k != "rope_parameters"}
    text.update(rope_theta=10000.0, rope_scaling={
        "rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True})
    old, new = FAMILY.make_config({**PRESET, "text_config": text}), FAMILY.make_config(PRESET)
    assert old.options.mrope_section == new.options.mrope_section == (2, 3, 3)
    assert old.rope == new.rope and old.qk_norm and not old.qkv_bias
    assert old.options.vision_config == new.options.vision_config


def _processor_attrs(preprocessor) -> dict:
    files = _module(FAMILY.make_config(PRESET)).genai_processor_files(preprocessor)
    return {t["operation"]["name"]: t["operation"].get("attrs")
            for t in files["processor_config.json"]["processor"]["transforms"]}


def test_processor_reads_the_checkpoint_size_and_falls_back_to_the_family():
    """Qwen3-VL checkpoints carry the pixel bounds as size's shortest / longest edge;
    without a preprocessor_config.json the family's bounds and mean/std stay."""
    ours = _processor_attrs({"size": {"shortest_edge": 4096, "longest_edge": 65536},
                             "rescale_factor": 1 / 127.5})
    assert (ours["resize"]["min_pixels"], ours["resize"]["max_pixels"]) == (4096, 65536)
    assert ours["rescale"]["rescale_factor"] == 1 / 127.5
    default = _processor_attrs({})
    assert (default["resize"]["min_pixels"], default["resize"]["max_pixels"]) == (
        65536, 16777216)
    assert default["normalize"]["mean"] == default["normalize"]["std"] == [0.5] * 3


@pytest.mark.parametrize("preprocessor, match", [
    ({"do_normalize": False}, "do_normalize=False is not supported"),
    ({"do_resize": False}, "do_resize=False"),
    ({"patch_size": 16}, "patch_size=16"),
    ({"merge_size": 3}, "merge_size=3"),
    ({"min_pixels": 9000, "max_pixels": 4096}, "min_pixels 9000 exceeds max_pixels 4096"),
    ({"max_pixels": -1}, "max_pixels must be a positive integer"),
    ({"image_mean": [0.5, 0.5]}, "image_mean must be 3 numbers"),
])
def test_processor_settings_genai_cannot_honour_fail_clearly(preprocessor, match):
    with pytest.raises(ConfigError, match=match):
        _processor_attrs(preprocessor)
