"""L3 + L4: the Phi-3-vision package (vision / embedding / decoder) vs the torch reference
(testing/phi3v_checkpoints.py: transformers' CLIPVisionModel + Phi3ForCausalLM holding the
hub-layout checkpoint's weights, the HD layout from the published description), f32.

* Parity: three images of genai's HD form (1 x 2, 2 x 2 and 1 x 1 sub-crops, each
  zero-padded to num_crops 4 + 1 crops), images 1 and 2 in row 0 (ids -1, -2), image 3
  in row 1 (left-padded by 3); the package chained as genai runs it (vision ->
  embedding -> decoder, 3 decode steps on the reference's greedy tokens). Compared to
  1e-4: image features, merged embeddings, logits of every step.
* Switches: layer_idx, LongRoPE (long / short factors, none), tied head: each case
  matches, and reverting it on the same weights moves the logits; values the
  checkpoint's code cannot run with images are refused up front.
* genai: onnxruntime-genai 0.18 runs the package as its own ``phi3v`` type. Hand-made
  inputs of its processor's form (input_ids with image i's tokens -i, pixel_values,
  image_sizes, num_image_tokens, through ``set_inputs``) and its whole pipeline from a
  prompt and PNG images (its processor reads the package's processor_config.json: 16 + 1
  crops, the tensors the reference ran on at build time) greedy-generate the reference's
  tokens, for 0, 1 and 2 images. genai's processor hard-wires 16 crops and CLIP's
  mean / std: a checkpoint processor asking other values is refused.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

import onnxruntime_genai as og

from mobius.builder import build
from mobius.errors import ConfigError, WeightsError
from mobius.models import phi3_v_parity_cases as cases
from mobius.models.phi3_v_parity_cases import (CASES_CONFIG, GENAI_IMAGES, NEW_TOKENS,
                                               PROCESSOR_KEYS, PROCESSOR_PROMPTS, STEPS,
                                               genai_prompt, processor_inputs, write_images)
from testing import vlm_reference, vlm_runs
from testing.parity import compare_logits
from testing.reference_cases import case_dir
from testing.switch_checks import CHANGED, assert_rejected_up_front, copy_case, edit_config
from testing.vlm_sessions import Sessions

F32_TOLERANCE = 1e-4


def _case(name):
    folder = case_dir(cases, name)
    return (os.path.join(folder, "ckpt"),
            vlm_reference.load(os.path.join(folder, "reference.npz")))


def _chain(folder, out, ep="default"):
    """(image features, prefill embeddings, per-step logits) of the saved package."""
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    return Sessions(package.save(str(out)), package.config)


def _run(sessions, ref):
    features = sessions.vision.run(None, {"pixel_values": ref["pixels"],
                                          "image_sizes": ref["sizes"]})[0]
    embeds = sessions.embed(ref["input_ids"], features)
    steps, _ = sessions.greedy(ref["input_ids"], embeds, ref["attention_mask"], STEPS,
                               tokens=ref.tokens)
    return features, embeds, steps


PARAMS = [(name, "default") for name in sorted(CASES_CONFIG)] + [("default", "cpu")]


@pytest.mark.parametrize("name,ep", PARAMS, ids=[f"{n}-{e}" for n, e in PARAMS])
def test_f32_parity(name, ep, tmp_path):
    folder, ref = _case(name)
    features, embeds, steps = _run(_chain(folder, tmp_path / "pkg", ep), ref)
    assert features.shape == ref["features"].shape
    assert features.shape[0] == int((ref["input_ids"] < 0).sum())
    for what, ours, theirs in (("features", features, ref["features"]),
                               ("embeddings", embeds, ref["merged"])):
        diff = float(np.abs(ours - theirs).max())
        assert diff <= F32_TOLERANCE, f"{name}: {what} {diff:.3g}"
    diff = compare_logits(steps, ref.logits, ref["attention_mask"])
    assert diff <= F32_TOLERANCE, f"{name}: logits {diff:.3g}"


#: switch: (case, config.json edit that reverts it)
SWITCHES = {
    "layer_idx": ("layer_idx_last", {"img_processor": {
        **CASES_CONFIG["layer_idx_last"]["img_processor"], "layer_idx": -2}}),
    "rope_scaling_long": ("default", {"rope_scaling": None}),
    "rope_scaling_short": ("longrope_short_factors", {"rope_scaling": None}),
    "tie_word_embeddings": ("no_rope_scaling_tied", {"tie_word_embeddings": False}),
}


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_reverted_switch_moves_logits(switch, tmp_path):
    case, revert = SWITCHES[switch]
    if "img_processor" in revert:  # a nested edit: the rest of the section stays
        with open(os.path.join(_case(case)[0], "config.json")) as f:
            revert = {"img_processor": {**json.load(f)["img_processor"],
                                        **revert["img_processor"]}}
    reverted = copy_case(cases, case, tmp_path / "reverted")
    edit_config(reverted, revert)
    ref = _case(case)[1]
    try:
        _, _, steps = _run(_chain(reverted, tmp_path / "pkg"), ref)
    except WeightsError as error:  # a structural switch: the head's tensor is then missing
        assert "missing" in str(error), error
        return
    diff = compare_logits(steps, ref.logits, ref["attention_mask"])
    assert diff > CHANGED, f"{switch}: changes nothing ({diff:.3g})"


#: a config.json section edit the family refuses, and the error's words
REJECTED = {
    "use_hd_transform": ("embd_layer", {"use_hd_transform": False}, "use_hd_transform false"),
    "separator": ("embd_layer", {"with_learnable_separator": False},
                  "with_learnable_separator false"),
    "hd_transform_order": ("embd_layer", {"hd_transform_order": "glb_sub"}, "'glb_sub'"),
    "hd_transform_order_default": ("embd_layer", {"hd_transform_order": None}, "'glb_sub'"),
    "projection_cls": ("embd_layer", {"projection_cls": "linear"}, "projection_cls 'linear'"),
    "type_feature": ("img_processor", {"type_feature": "cls_patch"}, "'cls_patch'"),
    "model_name": ("img_processor", {"model_name": "openai/clip-vit-base-patch16"},
                   "clip-vit-base-patch16"),
    "num_img_tokens": ("img_processor", {"num_img_tokens": 576}, "num_img_tokens 576"),
    "image_dim_out": ("img_processor", {"image_dim_out": 1024}, "image_dim_out 1024"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_unsupported_switch_is_refused_up_front(name, tmp_path):
    from mobius.tiny.presets import TINY_PRESETS

    section, edit, words = REJECTED[name]
    raw = json.loads(json.dumps(TINY_PRESETS["tiny-phi3v"]))
    for key, value in edit.items():
        if value is None:
            raw[section].pop(key)
        else:
            raw[section][key] = value
    assert_rejected_up_front(tmp_path, raw, words)


@pytest.fixture(scope="module")
def genai_package(tmp_path_factory):
    folder = os.path.join(case_dir(cases, "genai"), "ckpt")
    path = build(folder, execution_provider="cpu", dtype="f32").save(
        str(tmp_path_factory.mktemp("phi3v") / "pkg"))
    with np.load(os.path.join(case_dir(cases, "genai"), "genai.npz")) as recorded:
        tokens = {n: recorded[f"tokens.{n}"].tolist() for n in GENAI_IMAGES}
    return path, tokens


@pytest.mark.parametrize("images", sorted(GENAI_IMAGES))
def test_genai_phi3v_generates_like_reference(genai_package, images):
    path, expected = genai_package
    config = og.Config(path)
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": 1}}}}))
    model = og.Model(config)
    input_ids, pixels, sizes, counts = genai_prompt(images)
    inputs = input_ids
    if images:
        inputs = og.NamedTensors()
        inputs["input_ids"] = input_ids.astype(np.int32)  # what genai's processor makes
        inputs["pixel_values"] = pixels
        inputs["image_sizes"] = sizes
        inputs["num_image_tokens"] = counts
    tokens = vlm_runs.genai_greedy(model, inputs, input_ids.shape[1], NEW_TOKENS)
    assert tokens == expected[images]


@pytest.mark.parametrize("run", sorted(PROCESSOR_PROMPTS))
def test_genai_processor_pipeline_generates_like_reference(genai_package, run, tmp_path):
    """genai's whole phi3v pipeline from a prompt and PNG images: its processor gives the
    tensors the reference ran on (recorded at build time), and its greedy tokens are the
    reference's."""
    path, _ = genai_package
    model = og.Model(path)
    inputs = processor_inputs(model.create_multimodal_processor(), run,
                              write_images(str(tmp_path)))
    with np.load(os.path.join(case_dir(cases, "genai"), f"{run}.npz")) as recorded:
        for key in PROCESSOR_KEYS:
            np.testing.assert_array_equal(inputs[key].as_numpy(), recorded[key], err_msg=key)
        expected = recorded["tokens"].tolist()
    length = inputs["input_ids"].as_numpy().shape[1]
    assert vlm_runs.genai_greedy(model, inputs, length, NEW_TOKENS) == expected


def test_genai_processor(genai_package, tmp_path):
    """genai's phi3v processor loads the package's processor_config.json: 16 + 1 crops
    per image, and the vision model returns as many features as it counts tokens."""
    from PIL import Image

    path, _ = genai_package
    image = tmp_path / "image.png"
    pixels = np.random.default_rng(0).integers(0, 255, (500, 700, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(image)
    processor = og.Model(path).create_multimodal_processor()
    inputs = processor("<|user|>\n<|image_1|>\nWhat is it?<|end|>\n<|assistant|>\n",
                       images=og.Images.open(str(image)))
    values = inputs["pixel_values"].as_numpy()
    sizes = inputs["image_sizes"].as_numpy()
    assert values.shape[:2] == (1, 17)
    count = int(inputs["num_image_tokens"].as_numpy().sum())
    assert int((inputs["input_ids"].as_numpy() < 0).sum()) == count
    features = Sessions(path, None).vision.run(None, {"pixel_values": values,
                                                      "image_sizes": sizes})[0]
    assert features.shape[0] == count


#: preprocessor_config.json edit -> the error's words (None: builds, 16 crops)
PROCESSOR_EDITS = {
    "num_crops_absent": ({"num_crops": None}, None),
    "num_crops_4": ({"num_crops": 4}, "num_crops=4 is not supported"),
    "image_std": ({"image_std": [0.5, 0.5, 0.5]}, "image_std=[0.5, 0.5, 0.5] is not supported"),
}


@pytest.mark.parametrize("name", sorted(PROCESSOR_EDITS))
def test_processor_settings(name, tmp_path):
    """genai's processor fixes 16 crops and CLIP's mean / std: the checkpoint's processor
    may leave them out, any other value (Phi-3.5-vision ships num_crops 4) is refused."""
    folder = copy_case(cases, "default", tmp_path / "ckpt")
    config = os.path.join(folder, "preprocessor_config.json")
    with open(config) as f:
        preprocessor = json.load(f)
    assert preprocessor["num_crops"] == 16
    edit, words = PROCESSOR_EDITS[name]
    for key, value in edit.items():
        if value is None:
            del preprocessor[key]
        else:
            preprocessor[key] = value
    with open(config, "w") as f:
        json.dump(preprocessor, f)
    if words is not None:
        with pytest.raises(ConfigError, match=re.escape(words)):
            build(folder, execution_provider="cpu", dtype="f32")
        return
    path = build(folder, execution_provider="cpu", dtype="f32").save(str(tmp_path / "pkg"))
    with open(os.path.join(path, "processor_config.json")) as f:
        steps = json.load(f)["processor"]["transforms"]
    assert steps[-1]["operation"]["attrs"] == {"num_crops": 16, "num_img_tokens": 144}


#: Phi-3-vision-128k-instruct's config.json as published (its LongRoPE factors shortened)
HUB_CONFIG = {
    "architectures": ["Phi3VForCausalLM"], "auto_map": {
        "AutoConfig": "configuration_phi3_v.Phi3VConfig",
        "AutoModelForCausalLM": "modeling_phi3_v.Phi3VForCausalLM"},
    "bos_token_id": 1, "embd_layer": {
        "embedding_cls": "image", "hd_transform_order": "sub_glb", "projection_cls": "mlp",
        "use_hd_transform": True, "with_learnable_separator": True},
    "embd_pdrop": 0.0, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 3072,
    "img_processor": {"image_dim_out": 1024, "model_name": "openai/clip-vit-large-patch14-336",
                      "name": "clip_vision_model", "num_img_tokens": 144},
    "intermediate_size": 8192, "max_position_embeddings": 131072, "model_type": "phi3_v",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
    "rope_scaling": {"long_factor": [1.5] * 48, "short_factor": [1.0] * 48, "type": "su"},
    "rope_theta": 10000.0, "sliding_window": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 32064,
}


def test_hub_config_constructs():
    """The published config: CLIP ViT-L/14-336 read at hidden state 23 of 24 (layer 23
    declared unread), 336 px crops, LongRoPE from 4.x's "su"."""
    import onnx_ir as ir

    from mobius.context import build_context
    from mobius.models.registry import family_for

    family = family_for(HUB_CONFIG)
    config = family.make_config(HUB_CONFIG)
    assert config.rope.rope_type == "longrope"
    with build_context(None, ir.DataType.FLOAT):
        module = family.module(config)
    assert module.vision_embed_tokens.feature_state == 23
    assert len(module.vision_embed_tokens.img_processor.vision_model.encoder.layers) == 23
    assert [spec.dims for spec in module.vision_inputs] == [
        ("num_images", "num_crops", 3, 336, 336), ("num_images", 2)]
    assert any(r"layers\.(23)" in i.pattern for i in family.ignored_tensors(config))
