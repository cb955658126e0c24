"""L1: the Gemma 3 vision-language family (task image-text-to-text, three models)
builds for every built-in EP and every dtype it accepts, each saved model passes
the full ONNX checker, and the graph I/O, genai_config.json and processor_config.json
are what onnxruntime-genai's ``gemma3`` type reads: the decoder also takes
input_ids (image tokens attend to each other both ways), so it never gets
GroupQueryAttention (always causal). EPs that reject the task say so up front.

Also: config.json normalization (hub configs keep only non-default values) and the
errors for what the family does not support. Uses mobius' own numpy tiny
checkpoint; parity with transformers is gemma3_parity_test.py.
"""

from __future__ import annotations

import onnx
import pytest

from mobius.ep.registry import ep_registry
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models.gemma3 import FAMILY, Gemma3ForConditionalGeneration, normalize_gemma3
from mobius.models.registry import family_for
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_builds

GQA = "com.microsoft::GroupQueryAttention"
FLOAT = {"f32": onnx.TensorProto.FLOAT, "f16": onnx.TensorProto.FLOAT16,
         "bf16": onnx.TensorProto.BFLOAT16}
PRESET = TINY_PRESETS["tiny-gemma3-vl"]
TEXT, VISION = PRESET["text_config"], PRESET["vision_config"]


def _dims(value) -> list:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value.type.tensor_type.shape.dim]


def _io(graph) -> tuple[dict, dict]:
    return ({v.name: v for v in graph.input}, {v.name: v for v in graph.output})


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return make_tiny_checkpoint("tiny-gemma3-vl",
                                str(tmp_path_factory.mktemp("tiny") / "gemma3"))


@vlm_builds.every_ep_and_dtype
def test_builds_for_every_ep_and_dtype(ep, dtype, checkpoint, tmp_path):
    rejection = vlm_builds.rejection(FAMILY, checkpoint, ep, dtype)
    if rejection is not None:
        assert "gemma3" in rejection
        return
    caps = ep_registry.get(ep)
    saved = vlm_builds.build_checked(checkpoint, ep, dtype, tmp_path)
    package, graphs = saved.package, saved.graphs
    index_type = onnx.TensorProto.INT64 if caps.supports_int64 else onnx.TensorProto.INT32

    inputs, outputs = _io(graphs["vision"])
    assert _dims(inputs["pixel_values"])[1:] == [3, VISION["image_size"], VISION["image_size"]]
    assert _dims(outputs["image_features"])[1] == TEXT["hidden_size"]
    assert outputs["image_features"].type.tensor_type.elem_type == FLOAT[dtype]
    inputs, _ = _io(graphs["model"])
    layers = TEXT["num_hidden_layers"]
    past = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    assert list(inputs) == ["inputs_embeds", "input_ids", "attention_mask", "position_ids", *past]
    assert inputs["input_ids"].type.tensor_type.elem_type == index_type
    assert not any(f"{n.domain}::{n.op_type}" == GQA for m in package.models.values()
                   for n in m.graph)  # the image-block mask is not causal

    model = saved.genai_model
    assert model["type"] == "gemma3" and model["image_token_id"] == PRESET["image_token_index"]
    assert model["decoder"]["inputs"]["input_ids"] == "input_ids"
    assert model["vision"]["config_filename"] == "processor_config.json"
    for section, key in (("vision", "vision"), ("embedding", "embedding"), ("decoder", "model")):
        graph = package.models[key].graph
        names = {v.name for v in (*graph.inputs, *graph.outputs)}
        for name in (*model[section]["inputs"].values(), *model[section]["outputs"].values()):
            assert name in names or "%d" in name, (section, name)
    steps = saved.processor["transforms"]  # processor_config.json (asserted above)
    resize = next(s["operation"]["attrs"] for s in steps if s["operation"]["type"] == "Resize")
    assert resize["width"] == resize["height"] == VISION["image_size"]


# ---------------------------------------------------------------------------
# config.json normalization

#: google/gemma-3-4b-it's config.json (transformers 4.50): text / vision as diffs.
HUB = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
    "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144,
    "initializer_range": 0.02, "mm_tokens_per_image": 256, "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16,
                      "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False},
}


def _module(config):
    import onnx_ir as ir

    from mobius.context import build_context

    with build_context(None, ir.DataType.FLOAT):
        return Gemma3ForConditionalGeneration(config)


def test_registry_finds_gemma3_by_model_type_and_architecture():
    assert family_for(PRESET) is FAMILY
    assert family_for({"architectures": ["Gemma3ForConditionalGeneration"]}) is FAMILY


def test_hub_style_config_gets_transformers_defaults():
    config = FAMILY.make_config(HUB)
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (2560, 34, 262208)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (8, 4, 256)
    assert config.tie_word_embeddings and config.sliding_window == 1024
    assert config.eos_token_id == (1, 106)  # top-level ids win (<end_of_turn> is 106)
    # every 6th layer global (sliding_window_pattern 6), the rest local
    assert [config.layer_sliding_window(i) for i in range(6)] == [1024] * 5 + [None]
    module = _module(config)
    assert module.image_input_shape == (3, 896, 896) and module.image_token_id == 262144
    projector = module.multi_modal_projector
    assert (projector.side, projector.kernel) == (64, 4)  # 64 x 64 patches pooled to 16 x 16
    ropes = module.language_model.model
    assert ropes.layer_rope_kinds[:6] == ["sliding_attention"] * 5 + ["full_attention"]
    assert normalize_gemma3(normalize_gemma3(HUB)) == normalize_gemma3(HUB)


@pytest.mark.parametrize("overrides,error,match", [
    ({"text_config": {**TEXT, "model_type": "gemma2"}}, UnsupportedModelError, "gemma2"),
    ({"text_config": {**TEXT, "use_bidirectional_attention": True}}, UnsupportedModelError,
     "use_bidirectional_attention"),
    ({"vision_config": {**VISION, "model_type": "clip_vision_model"}}, UnsupportedModelError,
     "clip_vision_model"),
    ({"mm_tokens_per_image": 48}, ConfigError, "mm_tokens_per_image 48"),
    ({"mm_tokens_per_image": 1024}, ConfigError, "mm_tokens_per_image 1024"),
    ({"image_token_index": TEXT["vocab_size"]}, ConfigError, "image_token_index"),
])
def test_unsupported_configs_fail_clearly(overrides, error, match):
    with pytest.raises(error, match=match):
        _module(FAMILY.make_config({**PRESET, **overrides}))


@pytest.mark.parametrize("preprocessor, match", [
    ({"size": {"height": 96, "width": 96}}, "size=.*gemma3 image processor"),
    ({"do_pan_and_scan": True}, "do_pan_and_scan=True is not supported"),
    ({"resample": 3}, "resample=3"),
    ({"image_std": [0.5, 0.5]}, "image_std must be 3 numbers"),
    ({"rescale_factor": 0}, "rescale_factor must be a positive number"),
])
def test_processor_settings_genai_cannot_honour_fail_clearly(preprocessor, match):
    """A checkpoint preprocessor_config.json setting genai's gemma3 processor would not
    apply (another size, pan-and-scan, bicubic) fails rather than process differently."""
    with pytest.raises(ConfigError, match=match):
        _module(FAMILY.make_config(PRESET)).genai_processor_files(preprocessor)
