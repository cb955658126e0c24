"""L1: the Phi-4-multimodal family's package contract (no torch): the four models and
their I/O, genai_config.json and processor files as onnxruntime-genai's ``phi4mm``
type reads them; a config.json without audio_config builds no speech model and
clears genai's speech section; what the family does not support fails clearly."""

from __future__ import annotations

import json
import os

import onnx
import pytest

from mobius.builder import build
from mobius.errors import ConfigError
from mobius.models.phi4_multimodal import FAMILY, Phi4MultimodalForCausalLM
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.tiny.presets import TINY_PRESETS

PRESET = TINY_PRESETS["tiny-phi4mm"]


def _io(path: str) -> tuple[list[str], list[str]]:
    model = onnx.load(path, load_external_data=False)
    return [i.name for i in model.graph.input], [o.name for o in model.graph.output]


def test_package_is_what_genai_phi4mm_reads(tmp_path):
    folder = make_tiny_checkpoint("tiny-phi4mm", str(tmp_path / "ckpt"))
    out = build(folder, execution_provider="cpu", dtype="f32").save(str(tmp_path / "pkg"))
    with open(os.path.join(out, "genai_config.json")) as f:
        model = json.load(f)["model"]
    assert model["type"] == "phi4mm"
    assert model["vision"]["inputs"] == {"pixel_values": "pixel_values",
                                         "image_sizes": "image_sizes",
                                         "attention_mask": "image_attention_mask"}
    assert model["speech"]["filename"] == "speech.onnx"
    assert model["embedding"]["inputs"]["audio_features"] == "audio_features"
    for section in ("vision", "speech"):
        assert os.path.isfile(os.path.join(out, model[section]["config_filename"]))
    assert _io(os.path.join(out, "vision.onnx")) == (
        ["pixel_values", "image_sizes", "image_attention_mask"], ["image_features"])
    assert _io(os.path.join(out, "speech.onnx")) == (
        ["audio_embeds", "audio_attention_mask", "audio_sizes", "audio_projection_mode"],
        ["audio_features"])
    assert _io(os.path.join(out, "embedding.onnx")) == (
        ["input_ids", "image_features", "audio_features"], ["inputs_embeds"])


def test_without_audio_config_no_speech_model(tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = make_tiny_checkpoint("tiny-phi4mm", str(tmp_path / "ckpt"))
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    del config["audio_config"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    path = os.path.join(folder, "model.safetensors")
    save_file({k: v for k, v in load_file(path).items() if not k.startswith("audio_embed.")}, path)
    out = build(folder, execution_provider="cpu", dtype="f32").save(str(tmp_path / "pkg"))
    with open(os.path.join(out, "genai_config.json")) as f:
        model = json.load(f)["model"]
    assert model["speech"] == {"filename": "", "config_filename": ""}
    assert not os.path.exists(os.path.join(out, "speech.onnx"))
    assert _io(os.path.join(out, "embedding.onnx"))[0] == ["input_ids", "image_features"]


def _module(raw):
    import onnx_ir as ir

    from mobius.context import build_context

    with build_context(None, ir.DataType.FLOAT):
        return Phi4MultimodalForCausalLM(FAMILY.make_config(raw))


VOCAB = PRESET["vocab_size"]


@pytest.mark.parametrize("vision,audio,match", [
    ({"crop_size": 336}, {}, "crop_size 336 must equal image_size 448"),
    ({"image_token_id": VOCAB}, {}, "image_token_id"),
    ({}, {"audio_token_id": VOCAB + 5}, "audio_token_id"),
    ({}, {"downsample_rate": 2}, "downsample_rate 2"),
    ({}, {"time_reduction": 6}, "time_reduction 6"),
    ({}, {"ext_pw_out_channel": 16}, "ext_pw_out_channel"),
    ({"feature_layer": -4}, {}, "vision_feature_layer -4"),
])
def test_unsupported_configs_fail_clearly(vision, audio, match):
    raw = {**PRESET, "vision_config": {**PRESET["vision_config"], **vision},
           "audio_config": {**PRESET["audio_config"], **audio}}
    with pytest.raises(ConfigError, match=match):
        _module(raw)
