"""L1: the Qwen2.5-VL family (task image-text-to-text, three models) builds for
every built-in EP and every dtype it accepts (MLX rejects the task up front),
each saved model passes the full ONNX checker, and the graph I/O + genai_config
are genai's qwen2_5_vl contract: vision takes flattened patches +
image_grid_thw, the decoder position_ids [3, batch, seq].

Also: config.json in the transformers 4.x layout (text at the top level,
``rope_scaling: {"type": "mrope"}``, ``in_chans``) and the errors for what the
family does not support. Uses mobius' numpy tiny checkpoint (no torch);
parity with transformers is qwen2_5_vl_parity_test.py.
"""

from __future__ import annotations

import onnx
import pytest

from mobius.ep.registry import ep_registry
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models.qwen2_5_vl import FAMILY, Qwen2_5_VLForConditionalGeneration, normalize_qwen2_5_vl
from mobius.models.registry import family_for
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_builds

PRESET = TINY_PRESETS["tiny-qwen2_5_vl"]
TEXT, VISION = PRESET["text_config"], PRESET["vision_config"]
PATCH_DIM = 3 * 2 * 4 * 4  # channels * temporal_patch_size * patch_size^2


def _inputs(graph) -> dict:
    return {v.name: ([d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim],
                     v.type.tensor_type.elem_type) for v in graph.input}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return make_tiny_checkpoint("tiny-qwen2_5_vl", str(tmp_path_factory.mktemp("tiny") / "qvl"))


@vlm_builds.every_ep_and_dtype
def test_builds_for_every_ep_and_dtype(ep, dtype, checkpoint, tmp_path):
    if vlm_builds.rejection(FAMILY, checkpoint, ep, dtype) is not None:
        return
    caps = ep_registry.get(ep)
    saved = vlm_builds.build_checked(checkpoint, ep, dtype, tmp_path)
    graphs = saved.graphs
    index = onnx.TensorProto.INT64 if caps.supports_int64 else onnx.TensorProto.INT32
    vision = _inputs(graphs["vision"])
    assert list(vision) == ["pixel_values", "image_grid_thw"]
    assert vision["pixel_values"][0] == ["num_patches", PATCH_DIM]
    assert vision["image_grid_thw"] == (["num_images", 3], index)
    assert [o.name for o in graphs["vision"].output] == ["image_features"]
    decoder = _inputs(graphs["model"])
    assert decoder["position_ids"] == ([3, "batch_size", "sequence_length"], index)
    assert "input_ids" not in decoder and "inputs_embeds" in decoder

    model = saved.genai_model
    assert model["type"] == "qwen2_5_vl"
    assert (model["image_token_id"], model["video_token_id"], model["vision_start_token_id"]) == (
        PRESET["image_token_id"], PRESET["video_token_id"], PRESET["vision_start_token_id"])
    assert model["vision"]["inputs"] == {"pixel_values": "pixel_values",
                                         "image_grid_thw": "image_grid_thw"}
    assert {k: model["vision"][k] for k in ("spatial_merge_size", "patch_size", "window_size",
                                            "tokens_per_second")} == {
        k: VISION[k] for k in ("spatial_merge_size", "patch_size", "window_size",
                               "tokens_per_second")}
    assert model["embedding"]["inputs"] == {"input_ids": "input_ids",
                                            "image_features": "image_features"}
    steps = [t["operation"]["type"] for t in saved.processor["transforms"]]
    assert steps[-1] == "PatchImage"


def _module(config):
    import onnx_ir as ir

    from mobius.context import build_context

    with build_context(None, ir.DataType.FLOAT):
        return Qwen2_5_VLForConditionalGeneration(config)


def test_registry_finds_the_family():
    assert family_for(PRESET) is FAMILY
    assert family_for({"architectures": ["Qwen2_5_VLForConditionalGeneration"]}) is FAMILY


def test_transformers_4_layout_reads_the_same():
    """Qwen/Qwen2.5-VL-*-Instruct's config.json: decoder at the top level, rope_scaling mrope."""
    text = {k: v for k, v in TEXT.items() if k not in ("rope_parameters", "model_type")}
    vision = {**{k: v for k, v in VISION.items() if k != "in_channels"}, "in_chans": 3}
    raw = {**{k: v for k, v in PRESET.items() if k not in ("text_config", "vision_config")},
           **text, "rope_theta": 10000.0, "vision_config": vision,
           "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
    old, new = FAMILY.make_config(raw), FAMILY.make_config(PRESET)
    assert old.options.mrope_section == new.options.mrope_section == (2, 3, 3)
    assert old.rope == new.rope and old.qkv_bias and not old.o_bias
    assert old.options.vision_config == new.options.vision_config
    assert normalize_qwen2_5_vl(old.raw) == old.raw  # idempotent


def test_vision_defaults_fill_a_sparse_vision_config():
    raw = {**PRESET, "vision_config": {"out_hidden_size": 64}}
    vision = normalize_qwen2_5_vl(raw)["vision_config"]
    assert (vision["depth"], vision["hidden_size"], vision["window_size"]) == (32, 3584, 112)
    assert vision["fullatt_block_indexes"] == [7, 15, 23, 31]


_ROPE = TEXT["rope_parameters"]


@pytest.mark.parametrize("overrides,error,match", [
    ({"text_config": {**TEXT, "rope_parameters": {**_ROPE, "mrope_section": [2, 3, 4]}}},
     ConfigError, "mrope_section"),
    ({"text_config": {**TEXT, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}},
     ConfigError, "mrope_section"),
    ({"text_config": {**TEXT, "rope_parameters": {**_ROPE, "rope_type": "yarn"}}},
     UnsupportedModelError, "yarn"),
    ({"text_config": {**TEXT, "use_sliding_window": True, "sliding_window": 8}},
     UnsupportedModelError, "use_sliding_window"),
    ({"vision_config": {**VISION, "fullatt_block_indexes": [2]}}, ConfigError, "fullatt"),
    ({"vision_config": {**VISION, "window_size": 12}}, ConfigError, "window_size"),
    ({"vision_config": {**VISION, "num_heads": 16}}, ConfigError, "multiple of 4"),
    ({"vision_config": {**VISION, "out_hidden_size": 48}}, ConfigError, "out_hidden_size"),
    ({"image_token_id": TEXT["vocab_size"]}, ConfigError, "image_token_id"),
])
def test_unsupported_configs_fail_clearly(overrides, error, match):
    with pytest.raises(error, match=match):
        _module(FAMILY.make_config({**PRESET, **overrides}))
