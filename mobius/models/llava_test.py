"""L1: the LLaVA family (task image-text-to-text, three models) builds for every
built-in EP and every dtype it accepts, each saved model passes the full ONNX
checker, and the graph I/O + genai_config.json describe the three-model contract
(mobius/tasks/vision_language.py). EPs that reject the task up front (MLX: text
generation only) must say so before building.

Also: config.json normalization (llava-hf configs keep only non-default values)
and the errors for what the family does not support. Uses mobius' own numpy tiny
checkpoint (no torch needed); parity with transformers is llava_parity_test.py.
"""

from __future__ import annotations

import os

import onnx
import pytest

from mobius.request import check_supported
from mobius.ep.registry import ep_registry
from mobius.errors import ConfigError, MobiusError, UnsupportedModelError
from mobius.models.llava import FAMILY, LlavaForConditionalGeneration, normalize_llava
from mobius.models.registry import family_for
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_builds

GQA = "com.microsoft::GroupQueryAttention"
FLOAT = {"f32": onnx.TensorProto.FLOAT, "f16": onnx.TensorProto.FLOAT16,
         "bf16": onnx.TensorProto.BFLOAT16}
PRESET = TINY_PRESETS["tiny-llava"]
TEXT, VISION = PRESET["text_config"], PRESET["vision_config"]
TOKENS_PER_IMAGE = (VISION["image_size"] // VISION["patch_size"]) ** 2  # CLS dropped


def _dims(value) -> list:
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value.type.tensor_type.shape.dim]


def _io(graph) -> tuple[dict, dict]:
    return ({v.name: v for v in graph.input}, {v.name: v for v in graph.output})


def _elem(value) -> int:
    return value.type.tensor_type.elem_type


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    """mobius' numpy tiny-llava checkpoint, written once per module."""
    return make_tiny_checkpoint("tiny-llava", str(tmp_path_factory.mktemp("tiny") / "llava"))


@vlm_builds.every_ep_and_dtype
def test_builds_for_every_ep_and_dtype(ep, dtype, checkpoint, tmp_path):
    rejection = vlm_builds.rejection(FAMILY, checkpoint, ep, dtype)
    if rejection is not None:
        assert "llava" in rejection and "--ep" in rejection
        return
    caps = ep_registry.get(ep)
    saved = vlm_builds.build_checked(checkpoint, ep, dtype, tmp_path)
    package, graphs = saved.package, saved.graphs
    assert sorted(f for f in os.listdir(saved.path) if f.endswith(".onnx")) == [
        "embedding.onnx", "model.onnx", "vision.onnx"]
    float_type = FLOAT[dtype]
    index_type = onnx.TensorProto.INT64 if caps.supports_int64 else onnx.TensorProto.INT32

    inputs, outputs = _io(graphs["vision"])
    assert list(inputs) == ["pixel_values"] and list(outputs) == ["image_features"]
    assert _elem(inputs["pixel_values"]) == _elem(outputs["image_features"]) == float_type
    num_images, *image = _dims(inputs["pixel_values"])
    assert isinstance(num_images, str) and image == [3, 32, 32]
    num_tokens, hidden = _dims(outputs["image_features"])
    assert isinstance(num_tokens, str) and hidden == TEXT["hidden_size"]

    inputs, outputs = _io(graphs["embedding"])
    assert list(inputs) == ["input_ids", "image_features"] and list(outputs) == ["inputs_embeds"]
    assert _elem(inputs["input_ids"]) == index_type
    assert _dims(inputs["image_features"]) == [num_tokens, hidden]
    batch, seq = _dims(inputs["input_ids"])
    assert _dims(outputs["inputs_embeds"]) == [batch, seq, hidden]

    inputs, outputs = _io(graphs["model"])
    layers = TEXT["num_hidden_layers"]
    past = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    assert list(inputs) == ["inputs_embeds", "attention_mask", "position_ids", *past]
    assert _dims(inputs["inputs_embeds"]) == [batch, seq, hidden]
    assert _elem(inputs["inputs_embeds"]) == float_type
    assert list(outputs) == ["logits"] + [f"present.{i}.{k}" for i in range(layers)
                                          for k in ("key", "value")]
    assert _dims(outputs["logits"]) == [batch, seq, TEXT["vocab_size"]]

    # GroupQueryAttention: in the decoder where the EP fuses it, never in vision/embedding.
    gqa = {key: sum(1 for n in m.graph if f"{n.domain}::{n.op_type}" == GQA)
           for key, m in package.models.items()}
    fused = caps.fuses_gqa(package.models["model"].graph.inputs[0].dtype)
    assert gqa == {"vision": 0, "embedding": 0, "model": layers if fused else 0}

    _check_genai_config(saved.genai_model, package, caps)


def _check_genai_config(model, package, caps):
    assert model["type"] == "llava" and model["image_token_id"] == PRESET["image_token_index"]
    assert model["decoder"]["filename"] == "model.onnx"
    assert model["vision"]["filename"] == "vision.onnx"
    assert model["embedding"]["filename"] == "embedding.onnx"
    assert model["vision"]["inputs"] == {"pixel_values": "pixel_values"}
    assert model["vision"]["outputs"] == {"image_features": "image_features"}
    assert model["embedding"]["inputs"] == {"input_ids": "input_ids",
                                            "image_features": "image_features"}
    assert model["embedding"]["outputs"] == {"inputs_embeds": "inputs_embeds"}
    decoder_inputs = model["decoder"]["inputs"]
    assert "input_ids" not in decoder_inputs and decoder_inputs["inputs_embeds"] == "inputs_embeds"
    # every name genai is told about is a graph input/output of that file
    for section, key in (("vision", "vision"), ("embedding", "embedding"), ("decoder", "model")):
        graph = package.models[key].graph
        names = {v.name for v in (*graph.inputs, *graph.outputs)}
        for name in (*model[section]["inputs"].values(), *model[section]["outputs"].values()):
            assert name in names or "%d" in name, (section, name)
    # vision / embedding inherit the decoder's session options (provider options included)
    assert "session_options" not in model["vision"] and "session_options" not in model["embedding"]
    assert [next(iter(o)) for o in model["decoder"]["session_options"]["provider_options"]] == list(
        caps.provider_options)
    assert model["vocab_size"] == TEXT["vocab_size"]
    assert (model["bos_token_id"], model["eos_token_id"], model["pad_token_id"]) == (1, 2, 0)


def test_check_supported_rejects_the_task_on_text_only_eps():
    mlx = ep_registry.get("mlx")
    with pytest.raises(MobiusError, match="image-text-to-text"):
        check_supported(mlx, sorted(mlx.dtypes)[0], FAMILY.task, FAMILY.name)


# ---------------------------------------------------------------------------
# config.json normalization


def test_registry_finds_llava_by_model_type_and_architecture():
    assert family_for(PRESET) is FAMILY
    assert family_for({"architectures": ["LlavaForConditionalGeneration"]}) is FAMILY


def test_hub_style_config_gets_transformers_defaults():
    """llava-hf/llava-1.5-7b-hf's config.json: text/vision configs as diffs."""
    raw = {
        "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100,
        "image_token_index": 32000, "model_type": "llava", "pad_token_id": 32001,
        "projector_hidden_act": "gelu",
        "text_config": {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096,
                        "model_type": "llama", "rms_norm_eps": 1e-05, "torch_dtype": "float16",
                        "vocab_size": 32064},
        "tie_word_embeddings": False, "torch_dtype": "float16",
        "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                          "model_type": "clip_vision_model", "num_attention_heads": 16,
                          "num_hidden_layers": 24, "patch_size": 14, "projection_dim": 768,
                          "vocab_size": 32000},
        "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
        "vocab_size": 32064,
    }
    config = FAMILY.make_config(raw)
    assert config.model_type == "llava"
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers) == (
        4096, 11008, 32)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (32, 32, 128)
    assert (config.vocab_size, config.max_position_embeddings) == (32064, 4096)
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (1, (2,), 32001)
    assert config.rms_norm_eps == 1e-5 and not config.tie_word_embeddings
    module = _module(config)
    assert module.vision_tower.config.hidden_act == "quick_gelu"  # CLIPVisionConfig's default
    assert module.image_token_id == 32000
    assert module.image_input_shape == (3, 336, 336)
    assert module.tokens_per_image == 576  # (336 / 14)^2: llava-1.5's image_seq_length
    assert len(module.vision_tower.vision_model.encoder.layers) == 23  # layer -2 of 24


def _module(config):
    import onnx_ir as ir

    from mobius.context import build_context

    with build_context(None, ir.DataType.FLOAT):
        return LlavaForConditionalGeneration(config)


def test_missing_vision_config_is_llavas_default_tower():
    raw = {**PRESET}
    del raw["vision_config"]
    module = _module(FAMILY.make_config(raw))
    assert module.image_input_shape == (3, 336, 336)


def test_normalize_is_idempotent_and_keeps_the_text_config_switches():
    raw = {**PRESET, "text_config": {k: v for k, v in TINY_PRESETS["tiny-qwen2"].items()}}
    once = normalize_llava(raw)
    assert normalize_llava(once) == once
    config = FAMILY.make_config(raw)
    assert config.qkv_bias and not config.o_bias  # Qwen2's implied QKV bias
    assert config.tie_word_embeddings  # from text_config


@pytest.mark.parametrize("overrides,error,match", [
    ({"text_config": {**TEXT, "model_type": "gemma"}}, UnsupportedModelError, "gemma"),
    ({"vision_config": {**VISION, "model_type": "siglip_vision_model"}}, UnsupportedModelError,
     "siglip_vision_model"),
    ({"vision_feature_layer": -4}, ConfigError, "vision_feature_layer -4"),
    ({"vision_feature_select_strategy": "cls"}, ConfigError, "cls"),
    ({"image_token_index": TEXT["vocab_size"]}, ConfigError, "image_token_index"),
])
def test_unsupported_configs_fail_clearly(overrides, error, match):
    with pytest.raises(error, match=match):
        _module(FAMILY.make_config({**PRESET, **overrides}))
