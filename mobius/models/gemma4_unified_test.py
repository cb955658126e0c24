"""L3: the Gemma 4 Unified vision-language package vs transformers'
Gemma4UnifiedForConditionalGeneration, f32.

Per case (gemma4_unified_cases.py: every parameter and layer_scalar random) one batch of
two prompts, each with one image's merged patches (the smaller padded with (-1, -1)), row
1 left-padded by 3. The package runs as onnxruntime-genai chains it: vision -> embedding
-> decoder (inputs_embeds + input_ids), then each recorded greedy token through the
embedding model (no features) with present.* fed back as past_key_values.*. Compared,
each within 1e-4: image features, merged embeddings, prefill and decode-step logits.
Each switch case, reverted in config.json on the same weights, moves the outputs (or
needs tensors the checkpoint lacks). Values transformers cannot run are refused up front.

L4 (case "genai"): onnxruntime-genai 0.18 runs the cpu package as its gemma4_unified type
on transformers' merged patches and greedy-generates transformers' tokens.

genai's own processor (case "genai_image"): the package's processor_config.json
(mobius/models/gemma4_unified_image.py) lets genai create its multimodal processor; on a
PNG it makes the pixel inputs of testing/gemma4_unified_image.py (transformers'
processor's steps; checked against transformers' Gemma4 Pillow processor) within
PIXEL_TOLERANCE, and genai's greedy tokens through the processor (image; image and audio
clip) are transformers' on the reference's tensors. That prompt's 60 image tokens run past
the sliding window (6): the prefill matches transformers there too. Preprocessor values
genai cannot follow are refused up front.

Audio (encoder-free waveform frames, mobius/models/gemma4_unified_audio.py): case "audio"
(a batch of two prompts, image + loud clip / left-padded quiet clip padded to the longer
clip's frames, audio rms_norm_eps 0.05) runs speech -> embedding -> decoder on default and
cpu, compared within 1e-4 like the image path. Case "genai_audio": genai's speech
processor (Gemma4Audio raw_frames) cuts audio.wav into exactly transformers' frames and
expands <|audio|> to the clip's tokens; genai greedy-generates transformers' tokens from
those frames.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnxruntime_genai as og
import pytest
from safetensors.numpy import load_file, save_file

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.models import gemma4_unified_cases as cases
from mobius.models.gemma4_unified_image import image_transform_attrs
from mobius.models.gemma4_unified_vision import unified_vision_options
from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_runs
from testing.gemma4_vl_chain import (Chain, built_chain, diffs, edited, load_case,
                                     processor_package)
from testing.reference_cases import case_dir
from testing.vlm_reference import load as load_run
from testing.switch_checks import assert_rejected_up_front

TOLERANCE = 1e-4


@pytest.mark.parametrize("name", sorted(cases.OVERRIDES))
def test_f32_parity_with_transformers(name, tmp_path):
    folder, ref = load_case(cases, name)
    ours = built_chain(folder, tmp_path / "pkg").run(ref)
    assert ours[0].shape == ref["features"].shape, (ours[0].shape, ref["features"].shape)
    found = diffs(ours, ref)
    assert max(found.values()) <= TOLERANCE, f"{name}: {found}"
    assert float(np.abs(ref["features"]).mean()) > 0.1  # O(1) features: the image matters


def test_cpu_build_fuses_the_decoder_and_matches_the_prefill(tmp_path):
    """cpu: GroupQueryAttention in the decoder; prefill logits of the left-padded batch."""
    folder, ref = load_case(cases, "causal")
    package = build(folder, execution_provider="cpu", dtype="f32")
    ops = {n.op_type for n in package.models["model"].graph}
    assert "GroupQueryAttention" in ops, sorted(ops)
    chain = Chain(package.save(str(tmp_path / "pkg"), overwrite=True))
    features = chain.features(ref["pixel_values"], ref["image_position_ids"])
    logits, _ = chain.decode(ref["input_ids"], chain.embed(ref["input_ids"], features),
                             ref["attention_mask"], {})
    real = ref["attention_mask"].astype(bool)
    assert np.abs(logits - ref.logits[0])[real].max() <= TOLERANCE


#: (case, config.json edit that reverts one of its switches)
REVERTS = {
    "bidirectional": ("default", {"text_config": {"use_bidirectional_attention": None}}),
    "softcap": ("default", {"text_config": {"final_logit_softcapping": None}}),
    "k_eq_v": ("default", {"text_config": {"attention_k_eq_v": False}}),
    "kv_sharing": ("default", {"text_config": {"num_kv_shared_layers": 0}}),
    "double_wide": ("default", {"text_config": {"use_double_wide_mlp": False}}),
    "causal": ("causal", {"text_config": {"use_bidirectional_attention": "vision"}}),
    "pool3": ("pool3", {"vision_config": {"pooling_kernel_size": 2}}),
    "plain_softcap": ("plain", {"text_config": {"final_logit_softcapping": 10.0}}),
}


@pytest.mark.parametrize("name", sorted(REVERTS))
def test_reverting_the_switch_changes_the_outputs(name, tmp_path):
    case, edit = REVERTS[name]
    folder, ref = load_case(cases, case)
    reverted = edited(folder, tmp_path / "ckpt", edit)
    try:
        ours = built_chain(reverted, tmp_path / "pkg").run(ref)
    except MobiusError as error:  # the reverted model needs other tensors
        assert "tensor" in str(error), error
        return
    assert max(diffs(ours, ref).values()) > 1e-2, name


def test_bidirectional_attention_is_the_default(tmp_path):
    """A text_config without the key builds the bidirectional decoder ("default")."""
    folder, ref = load_case(cases, "default")
    path = os.path.join(tmp_path, "ckpt")
    shutil.copytree(folder, path)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    del config["text_config"]["use_bidirectional_attention"]
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    assert max(diffs(built_chain(path, tmp_path / "pkg").run(ref), ref).values()) <= TOLERANCE


REJECTED = {
    "output_proj_dims": ({"vision_config": {"output_proj_dims": 24}}, "output_proj_dims"),
    "no_vision_config": ({"vision_config": None}, "vision_config"),
    "bidirectional_all": ({"text_config": {"use_bidirectional_attention": "all"}},
                          "use_bidirectional_attention"),
    "bidirectional_text": ({"text_config": {"use_bidirectional_attention": "text"}},
                           "use_bidirectional_attention"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_unsupported_values_are_rejected_up_front(name, tmp_path):
    edit, words = REJECTED[name]
    config = dict(TINY_PRESETS[cases.PRESET])
    for section, values in edit.items():
        config[section] = None if values is None else {**config[section], **values}
    if config["vision_config"] is None:
        del config["vision_config"]
    assert_rejected_up_front(tmp_path, config, words)


def test_genai_greedy_tokens_equal_transformers(tmp_path):
    folder = case_dir(cases, "genai")
    package = build(os.path.join(folder, "ckpt"), execution_provider="cpu", dtype="f32")
    model = og.Model(package.save(str(tmp_path / "pkg")))
    ref = dict(np.load(os.path.join(folder, "genai.npz")))
    inputs = og.NamedTensors()
    inputs["input_ids"] = ref["input_ids"].astype(np.int32)
    inputs["pixel_values"] = ref["pixel_values"]
    inputs["pixel_position_ids"] = ref["image_position_ids"]
    inputs["num_image_tokens"] = np.array([int(ref["count"])], np.int64)
    expected = [int(t) for t in ref["tokens"][0]]
    tokens = vlm_runs.genai_greedy(model, inputs, ref["input_ids"].shape[1], len(expected))
    assert tokens == expected
    assert len(set(expected)) > 1, "degenerate continuation: the comparison would prove little"


def _audio_run(chain: Chain, ref) -> dict[str, float]:
    """Max |difference| of image and audio features, merged embeddings, step logits."""
    features = chain.features(ref["pixel_values"], ref["image_position_ids"])
    audio = chain.audio(ref["input_features"], ref["input_features_mask"])
    assert audio.shape == ref["audio"].shape, (audio.shape, ref["audio"].shape)
    ids, mask = ref["input_ids"], ref["attention_mask"]
    embeds = chain.embed(ids, features, audio)
    logits, past = chain.decode(ids, embeds, mask, {})
    real = mask.astype(bool)
    found = {"features": np.abs(features - ref["features"]).max(),
             "audio": np.abs(audio - ref["audio"]).max(),
             "merged": np.abs(embeds - ref["merged"])[real].max(),
             "logits0": np.abs(logits - ref.logits[0])[real].max()}
    for i, token in enumerate(ref.tokens, start=1):
        mask = np.concatenate([mask, np.ones((len(mask), 1), mask.dtype)], axis=1)
        step = chain.embed(token, np.zeros((0, chain.width), np.float32))
        logits, past = chain.decode(token, step, mask, past)
        found[f"logits{i}"] = np.abs(logits - ref.logits[i]).max()
    return {k: float(v) for k, v in found.items()}


def _audio_case():
    folder = case_dir(cases, cases.AUDIO)
    return os.path.join(folder, "ckpt"), load_run(os.path.join(folder, "audio.npz"))


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_audio_batch_matches_transformers(ep, tmp_path):
    folder, ref = _audio_case()
    found = _audio_run(built_chain(folder, tmp_path / "pkg", ep), ref)
    assert max(found.values()) <= TOLERANCE, f"{ep}: {found}"
    assert float(np.abs(ref["audio"]).mean()) > 0.1  # O(1) soft tokens: the audio matters
    assert not ref["input_features_mask"].all()  # row 1's clip has padding frames


#: config.json edits of the audio case that must move its outputs
AUDIO_REVERTS = {
    "eps": {"audio_config": {"rms_norm_eps": 1e-6}},
    "audio_token_id": {"audio_token_id": TINY_PRESETS[cases.PRESET]["video_token_id"]},
    "frame_size": {"audio_config": {"audio_embed_dim": 48}},
}


@pytest.mark.parametrize("name", sorted(AUDIO_REVERTS))
def test_audio_switches_change_the_outputs(name, tmp_path):
    folder, ref = _audio_case()
    path = edited(folder, tmp_path / "ckpt", {k: v for k, v in AUDIO_REVERTS[name].items()
                                               if isinstance(v, dict)})
    if name == "audio_token_id":
        with open(os.path.join(path, "config.json")) as f:
            config = json.load(f)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump({**config, **AUDIO_REVERTS[name]}, f)
    try:
        found = _audio_run(built_chain(path, tmp_path / "pkg"), ref)
    except MobiusError as error:  # the edited model needs other tensors
        assert "tensor" in str(error) or "shape" in str(error), error
        return
    assert max(found.values()) > 1e-2, name


def test_audio_config_aliases(tmp_path):
    """transformers' aliases of audio_embed_dim: one alone sets it, disagreeing ones are
    refused."""
    folder, ref = _audio_case()
    alias = {"audio_samples_per_token": 24, "rms_norm_eps": cases.AUDIO_EPS}
    path = edited(folder, tmp_path / "ckpt", {})
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    config["audio_config"] = alias
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    assert max(_audio_run(built_chain(path, tmp_path / "pkg"), ref).values()) <= TOLERANCE
    bad = dict(TINY_PRESETS[cases.PRESET])
    bad["audio_config"] = {**bad["audio_config"], "output_proj_dims": 32}
    (tmp_path / "bad").mkdir()
    assert_rejected_up_front(tmp_path / "bad", bad, "audio_config frame sizes disagree")



def test_without_audio_config_the_package_has_no_speech_model(tmp_path):
    """No audio_config: embed_audio's tensors are refused as unread; without them the
    package has no speech model and genai_config blanks the speech processor."""
    folder, _ = _audio_case()
    path = edited(folder, tmp_path / "ckpt", {})
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    del config["audio_config"]
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    with pytest.raises(MobiusError, match="embed_audio"):
        build(path, execution_provider="default", dtype="f32")
    weights = os.path.join(path, "model.safetensors")
    kept = {k: v for k, v in load_file(weights).items() if ".embed_audio." not in k}
    save_file(kept, weights, metadata={"format": "pt"})
    package = build(path, execution_provider="default", dtype="f32")
    assert "speech" not in package.models, sorted(package.models)
    with open(os.path.join(package.save(str(tmp_path / "pkg")), "genai_config.json")) as f:
        assert json.load(f)["model"]["speech"] == {"config_filename": ""}


def _genai_audio():
    folder = case_dir(cases, cases.GENAI_AUDIO)
    return folder, dict(np.load(os.path.join(folder, "genai_audio.npz")))


@pytest.fixture(scope="module")
def genai_audio_package(tmp_path_factory):
    folder, ref = _genai_audio()
    package = build(os.path.join(folder, "ckpt"), execution_provider="cpu", dtype="f32")
    return package.save(str(tmp_path_factory.mktemp("genai_audio") / "pkg")), folder, ref


def test_genai_audio_greedy_tokens_equal_transformers(genai_audio_package):
    path, _, ref = genai_audio_package
    model = og.Model(path)
    inputs = og.NamedTensors()
    inputs["input_ids"] = ref["input_ids"].astype(np.int32)
    inputs["audio_embeds"] = ref["input_features"]
    inputs["audio_attention_mask"] = ref["input_features_mask"]
    inputs["audio_sizes"] = np.array([int(ref["input_features_mask"].sum())], np.int64)
    expected = [int(t) for t in ref["tokens"][0]]
    tokens = vlm_runs.genai_greedy(model, inputs, ref["input_ids"].shape[1], len(expected))
    assert tokens == expected
    assert len(set(expected)) > 1, "degenerate continuation: the comparison would prove little"


def test_genai_frames_equal_transformers_frames(genai_audio_package, tmp_path):
    """genai's speech processor on audio.wav: transformers' frames exactly (both are the
    16 bit samples / 32768, the last frame zero-padded) and the prompt's audio span."""
    path, folder, ref = genai_audio_package
    work = processor_package(path, tmp_path / "pkg")  # the markers in its tokenizer
    processor = og.Model(work).create_multimodal_processor()
    out = processor("<|audio|>", audios=og.Audios.open(os.path.join(folder, "audio.wav")))
    frames = out["audio_embeds"].as_numpy()
    assert frames.shape == ref["input_features"].shape, frames.shape
    assert np.abs(frames - ref["input_features"]).max() == 0.0
    assert out["audio_attention_mask"].as_numpy().all()
    ids = [int(t) for t in out["input_ids"].as_numpy()[0]]
    preset = TINY_PRESETS[cases.PRESET]
    count = len(frames[0])
    span = [preset["boa_token_id"], *[preset["audio_token_id"]] * count,
            preset["eoa_token_index"]]
    assert any(ids[i:i + len(span)] == span for i in range(len(ids))), ids


#: genai's pixel values vs the reference's: both resize bicubic with antialias, genai in
#: float, transformers (torchvision's uint8 kernel) rounding to 8 bits after each pass,
#: so up to 1.5 levels apart on a resized image; equal to float rounding where none is
PIXEL_TOLERANCE = {"resized": 1.5 / 255, "exact": 1e-7}


#: preprocessor_config.json values genai's transform cannot follow (or transformers refuses)
PREPROCESSOR_REJECTED = {
    "geometry": ({"patch_size": 2, "pooling_kernel_size": 3}, "merged patch"),
    "budget": ({"max_soft_tokens": 100}, "max_soft_tokens"),
    "no_resize": ({"do_resize": False}, "do_resize"),
    "bilinear": ({"resample": 2}, "resample"),
    "no_rescale": ({"do_rescale": False}, "do_rescale"),
    "rescale_factor": ({"rescale_factor": 1 / 127.5}, "rescale_factor"),
    "normalize": ({"do_normalize": True, "image_mean": [0.5] * 3, "image_std": [0.5] * 3},
                  "normalization"),
}


@pytest.mark.parametrize("name", sorted(PREPROCESSOR_REJECTED))
def test_unsupported_image_processor_values_are_rejected_up_front(name, tmp_path):
    processor, words = PREPROCESSOR_REJECTED[name]
    assert_rejected_up_front(tmp_path, dict(TINY_PRESETS[cases.PRESET]), words,
                             {"preprocessor_config.json": processor})


def test_image_transform_follows_the_processor_geometry():
    """Only patch x kernel matters (the merged tile); an identity normalization is fine."""
    vision = unified_vision_options(TINY_PRESETS[cases.PRESET]["vision_config"])
    stated = {"patch_size": 4, "pooling_kernel_size": 1, "max_soft_tokens": 140,
              "do_normalize": True, "image_mean": [0.0] * 3, "image_std": [1.0] * 3}
    assert image_transform_attrs(stated, vision) == {
        "patch_size": 4, "max_soft_tokens": 140, "pooling_kernel_size": 1}
    assert image_transform_attrs({}, vision)["max_soft_tokens"] == 280


@pytest.fixture(scope="module")
def genai_image(tmp_path_factory):
    """(saved cpu package of the genai image case, its folder, its image.npz)."""
    folder = case_dir(cases, cases.GENAI_IMAGE)
    package = build(os.path.join(folder, "ckpt"), execution_provider="cpu", dtype="f32")
    path = package.save(str(tmp_path_factory.mktemp("genai_image") / "pkg"))
    return path, folder, dict(np.load(os.path.join(folder, "image.npz")))


def test_reference_pixels_equal_transformers_pillow_processor(genai_image):
    """The reference (testing/gemma4_unified_image.py) vs transformers' Gemma4 Pillow
    processor at the merged side: the same tiles and positions, pixels within one 8-bit
    level (Pillow's and torch's uint8 resizes round differently)."""
    _, _, ref = genai_image
    for name in cases.IMAGES:
        assert np.array_equal(ref[f"{name}_pil_positions"], ref[f"{name}_positions"]), name
        found = np.abs(ref[f"{name}_pil_pixel_values"] - ref[f"{name}_pixel_values"]).max()
        assert found <= 1 / 255 + 1e-6, (name, found)


@pytest.mark.parametrize("name", sorted(cases.IMAGES))
def test_genai_image_processor_matches_the_reference(name, genai_image):
    """genai's processor, created on the package as written, on a PNG: transformers'
    tiles (positions and soft-token count exactly, pixels within PIXEL_TOLERANCE) and
    the prompt's ids as the reference expands it."""
    path, folder, ref = genai_image
    with open(os.path.join(path, "processor_config.json")) as f:
        transform = json.load(f)["processor"]["transforms"][1]["operation"]
    assert transform["attrs"] == {"patch_size": 4, "max_soft_tokens": cases.IMAGE_SOFT,
                                  "pooling_kernel_size": 1}
    processor = og.Model(path).create_multimodal_processor()
    out = processor(cases.IMAGE_PROMPT, images=og.Images.open(os.path.join(folder,
                                                                          f"{name}.png")))
    count = int(ref[f"{name}_count"])
    assert int(out["num_image_tokens"].as_numpy()[0]) == count
    assert np.array_equal(out["pixel_position_ids"].as_numpy()[0], ref[f"{name}_positions"])
    found = np.abs(out["pixel_values"].as_numpy()[0] - ref[f"{name}_pixel_values"]).max()
    assert found <= PIXEL_TOLERANCE[name], found
    if name == "resized":
        assert found > 0.0  # the two resizes do differ: the tolerance is needed
        assert out["input_ids"].as_numpy().tolist() == ref["image_ids"].tolist()


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_image_longer_than_the_window_matches_transformers(ep, genai_image, tmp_path):
    """The genai image prompt's prefill: its image run (60 tokens) is longer than the
    sliding window (6), which it attends past, as transformers' forward lets it."""
    _, folder, ref = genai_image
    chain = built_chain(os.path.join(folder, "ckpt"), tmp_path / "pkg", ep)
    count, ids = int(ref["resized_count"]), ref["image_ids"]
    features = chain.features(ref["resized_pixel_values"][None, :count],
                              ref["resized_positions"][None, :count])
    logits, _ = chain.decode(ids, chain.embed(ids, features), np.ones_like(ids), {})
    assert count > TINY_PRESETS[cases.PRESET]["text_config"]["sliding_window"]
    assert np.abs(logits - ref["image_logits"]).max() <= TOLERANCE


@pytest.mark.parametrize("prompt", ["image", "image_audio"])
def test_genai_processor_greedy_tokens_equal_transformers(prompt, genai_image):
    """genai's processor on resized.png (and audio.wav) feeds genai's greedy run, which
    gives transformers' tokens on the reference's pixel inputs (and frames)."""
    path, folder, ref = genai_image
    model = og.Model(path)
    processor = model.create_multimodal_processor()
    text = cases.IMAGE_PROMPT if prompt == "image" else cases.AUDIO_PROMPT
    audios = (og.Audios.open(os.path.join(folder, "audio.wav")) if prompt == "image_audio"
              else None)
    inputs = processor(text, images=og.Images.open(os.path.join(folder, "resized.png")),
                       audios=audios)
    ids = ref[f"{prompt}_ids"]
    assert inputs["input_ids"].as_numpy().tolist() == ids.tolist()
    expected = [int(t) for t in ref[f"{prompt}_tokens"][0]]
    assert vlm_runs.genai_greedy(model, inputs, ids.shape[1], len(expected)) == expected
    assert len(set(expected)) > 1, "degenerate continuation: the comparison would prove little"
