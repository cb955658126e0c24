"""L3 / L4: the Gemma 4 vision-language package vs transformers'
Gemma4ForConditionalGeneration, f32.

Per case (gemma4_vl_cases.py: every parameter and read buffer random) one batch of two
prompts, each with one image (transformers' processor: patches padded to its budget, (-1, -1)
positions), row 1 left-padded by 3. The package runs as onnxruntime-genai chains it: vision
-> embedding -> decoder (inputs_embeds + input_ids), then each recorded greedy token through
the embedding model (no features) with present.* fed back as past_key_values.*. Compared,
each within 1e-4: image features, merged embeddings, prefill and decode-step logits. Each
switch case, reverted in config.json on the same weights, moves the outputs (or needs
tensors the checkpoint lacks / leaves some unread).

L4 (cases "genai", "genai_causal"): onnxruntime-genai 0.18 runs the cpu package as its gemma4
type on transformers' processed inputs and greedy-generates transformers' tokens; its own processor
makes transformers' patch positions and token count of the same PNG, and pixels within
its resize's difference.
"""

from __future__ import annotations

import os

import numpy as np
import onnxruntime_genai as og
import pytest

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.models import gemma4_vl_cases as cases
from mobius.tiny.presets import TINY_PRESETS
from testing.gemma4_vl_chain import Chain, built_chain, diffs, edited, load_case
from testing.reference_cases import case_dir
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


def test_each_image_alone_on_its_real_patches(tmp_path):
    """genai runs the tower on an image's real patches only (no padding): the same tokens."""
    folder, ref = load_case(cases, "default")
    chain = built_chain(folder, tmp_path / "pkg")
    parts = []
    for pixels, positions in zip(ref["pixel_values"], ref["image_position_ids"]):
        real = (positions != -1).any(-1)
        parts.append(chain.features(pixels[real][None], positions[real][None]))
    diff = np.abs(np.concatenate(parts) - ref["features"]).max()
    assert diff <= TOLERANCE, diff


def test_cpu_build_fuses_the_decoder_and_matches_the_prefill(tmp_path):
    """cpu: GroupQueryAttention in the decoder; prefill logits of the left-padded batch."""
    folder, ref = load_case(cases, "default")
    package = build(folder, execution_provider="cpu", dtype="f32")
    ops = {n.op_type for n in package.models["model"].graph}
    assert "GroupQueryAttention" in ops, sorted(ops)
    chain = Chain(package.save(str(tmp_path / "pkg"), overwrite=True))
    features = chain.features(ref["pixel_values"], ref["image_position_ids"])
    logits, _ = chain.decode(ref["input_ids"], chain.embed(ref["input_ids"], features),
                             ref["attention_mask"], {})
    real = ref["attention_mask"].astype(bool)
    assert np.abs(logits - ref.logits[0])[real].max() <= TOLERANCE


#: case: config.json edit that reverts its switch
REVERTS = {
    "clipped": {"vision_config": {"use_clipped_linears": False}},
    "standardize": {"vision_config": {"standardize": False}},
    "pool3": {"vision_config": {"pooling_kernel_size": 2}},
    "tower_silu": {"vision_config": {"hidden_activation": "gelu_pytorch_tanh"}},
    "tower_gqa_theta": {"vision_config": {"rope_parameters": {"rope_type": "axial",
                                                              "rope_theta": 100.0}}},
    "bidirectional": {"text_config": {"use_bidirectional_attention": None}},
}


@pytest.mark.parametrize("name", sorted(REVERTS))
def test_reverting_the_switch_changes_the_outputs(name, tmp_path):
    folder, ref = load_case(cases, name)
    reverted = edited(folder, tmp_path / "ckpt", REVERTS[name])
    try:
        ours = built_chain(reverted, tmp_path / "pkg").run(ref)
    except MobiusError as error:  # the reverted model needs other tensors
        assert "tensor" in str(error), error
        return
    if ours[0].shape != ref["features"].shape:
        return
    assert max(diffs(ours, ref).values()) > 1e-2, name


REJECTED = {
    "pooling_kernel_1": ({"pooling_kernel_size": 1}, "pooling_kernel_size"),
    "rope_type": ({"rope_parameters": {"rope_type": "default", "rope_theta": 100.0}},
                  "rope_type"),
    "head_dim": ({"head_dim": 18}, "head_dim"),
    "no_vision_config": (None, "vision_config"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_unsupported_vision_values_are_rejected_up_front(name, tmp_path):
    edit, words = REJECTED[name]
    raw = dict(TINY_PRESETS[cases.PRESET])
    vision = raw.pop("vision_config")
    config = raw if edit is None else {**raw, "vision_config": {**vision, **edit}}
    assert_rejected_up_front(tmp_path, config, words)


def _genai_package(tmp_path, case="genai"):
    folder = case_dir(cases, case)
    package = build(os.path.join(folder, "ckpt"), execution_provider="cpu", dtype="f32")
    model = og.Model(package.save(str(tmp_path / "pkg")))
    return model, dict(np.load(os.path.join(folder, "genai.npz"))), folder


def _greedy(model, inputs: og.NamedTensors, count: int) -> list[int]:
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=256, do_sample=False)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    tokens = []
    while not generator.is_done() and len(tokens) < count:
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    return tokens


@pytest.mark.parametrize("case", sorted(cases.GENAI))
def test_genai_greedy_tokens_equal_transformers(tmp_path, case):
    model, ref, _ = _genai_package(tmp_path, case)
    inputs = og.NamedTensors()
    inputs["input_ids"] = ref["input_ids"].astype(np.int32)
    inputs["pixel_values"] = ref["pixel_values"]
    inputs["pixel_position_ids"] = ref["image_position_ids"]
    inputs["num_image_tokens"] = np.array([int(ref["count"])], np.int64)
    expected = [int(t) for t in ref["tokens"][0]]
    eos = TINY_PRESETS[cases.PRESET]["text_config"]["eos_token_id"]
    if eos in expected:  # genai stops there
        expected = expected[:expected.index(eos) + 1]
    assert _greedy(model, inputs, len(expected)) == expected
    assert len(set(expected)) > 1, "degenerate continuation: the comparison would prove little"


def test_genai_processor_patches_the_image_as_transformers(tmp_path):
    model, ref, folder = _genai_package(tmp_path)
    processor = model.create_multimodal_processor()
    inputs = processor("A <|image> b", images=og.Images.open(os.path.join(folder, "image.png")))
    ids = inputs["input_ids"].as_numpy()[0]
    count = int(ref["count"])
    image = cases.TINY_PRESETS[cases.PRESET]["image_token_id"]
    assert int((ids == image).sum()) == count == int(inputs["num_image_tokens"].as_numpy()[0])
    np.testing.assert_array_equal(inputs["pixel_position_ids"].as_numpy(),
                                  ref["image_position_ids"])
    pixels = inputs["pixel_values"].as_numpy()
    assert pixels.shape == ref["pixel_values"].shape
    assert float(np.abs(pixels - ref["pixel_values"]).mean()) < 0.01  # bicubic resizes differ
