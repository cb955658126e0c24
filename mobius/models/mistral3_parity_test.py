"""L3: the three-model Mistral 3 package vs transformers' Mistral3ForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-mistral3 preset plus per-case
overrides (testing/mistral3_checkpoints.py). One batch of 2 prompts, row 0 with a
24 x 40 px image and row 1 (left-padded by 3) with a 16 x 32 px one: transformers
takes both zero-padded to 24 x 40 with ``image_sizes``; the package's vision model
runs once per image on its own pixels, as onnxruntime-genai does. Then embedding
-> decoder and 3 decode steps (the greedy token through the embedding model with
zero image features, present.* back as past_key_values.*). Compared, each to 1e-4:
image_features vs ``get_image_features`` (2-D rotary, patch merger over
non-square grids), the merged embeddings, and the logits of the prefill (real
positions) and every decode step. Each case flips one switch the family reads.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import torch

from mobius.builder import build
from mobius.tiny.presets import TINY_PRESETS
from testing.hf_checkpoints import (checkpoint_cases, load_hf_model,
                                    renamed_checkpoint)
from testing.mistral3_checkpoints import (SIZES, TOKEN_IDS, image_span,
                                          make_images, make_mistral3_checkpoint)
from testing.parity import compare_logits, position_ids_for
from testing.vlm_sessions import Sessions, assert_chain_matches

F32_TOLERANCE = 1e-4
STEPS, PAD = 3, 3
GQA = "com.microsoft::GroupQueryAttention"
_LLAMA_TEXT = {**TINY_PRESETS["tiny-mistral3"]["text_config"], "model_type": "llama"}
_VISION = TINY_PRESETS["tiny-mistral3"]["vision_config"]

# name: tiny-mistral3 overrides (each changes the output where the default would not)
CASES = {
    "default": {},  # merge 2, last hidden state, GELU, no projector bias, untied head
    "no_merge": {"spatial_merge_size": 1},
    "projector_bias": {"multimodal_projector_bias": True},
    "first_layer_state": {"vision_feature_layer": [-2]},  # the state after layer 0 of 2
    "silu_projector": {"projector_hidden_act": "silu"},
    "tied": {"tie_word_embeddings": True},  # the head reads the token embedding
    "llama_text_silu_tower": {"text_config": _LLAMA_TEXT,
                              "vision_config": {**_VISION, "hidden_act": "silu"}},
    "sliding_window": {"text_config": {**TINY_PRESETS["tiny-mistral3"]["text_config"],
                                       "sliding_window": 8}},  # Mistral's, on a 23-token prompt
    "tower_rope_theta": {"vision_config": {**_VISION, "rope_parameters": {
        "rope_type": "axial", "rope_theta": 100.0}}},
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cases(tmp_path_factory,
                            lambda folder, name: make_mistral3_checkpoint(folder, **CASES[name]))


class Package(Sessions):
    """The saved package's three onnxruntime sessions."""

    def __init__(self, path: str, package):
        super().__init__(path, package.config)
        self.package = package

    def image_features(self, images):
        """One vision run per image (its own size), features concatenated in order."""
        return np.concatenate([self.vision.run(None, {"pixel_values": image[None]})[0]
                               for image in images])

    def generate(self, inputs, steps=STEPS):
        """(image_features, prefill inputs_embeds, per-step logits, greedy tokens)."""
        features = self.image_features(inputs["images"])
        embeds = self.embed(inputs["input_ids"], features)
        return (features, embeds,
                *self.greedy(inputs["input_ids"], embeds, inputs["attention_mask"], steps))


def build_and_load(folder, out_dir, ep="default") -> Package:
    package = build(folder, execution_provider=ep, dtype="f32")
    return Package(package.save(str(out_dir), overwrite=True), package)


def make_inputs(hf_model, seed=0, pad=PAD) -> dict:
    """Row 0: text, a 24 x 40 image, text; row 1 (left-padded by ``pad``): a 16 x 32 image."""
    config = hf_model.config
    rng = np.random.default_rng(seed)
    first_image_token = min(TOKEN_IDS.values())
    text = lambda n: [int(t) for t in rng.integers(4, first_image_token, size=n)]  # noqa: E731
    span0, span1 = image_span(config, SIZES[0]), image_span(config, SIZES[1])
    row0 = text(2) + span0 + text(3)
    rest = len(row0) - pad - len(span1) - 1
    row1 = [0] * pad + text(1) + span1 + text(rest)
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    images, padded, sizes = make_images(config, SIZES, rng)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "images": images,
            "pixel_values": padded, "image_sizes": sizes}


def hf_reference(hf_model, inputs, tokens):
    """transformers' image features, merged embeddings and per-step logits."""
    with torch.no_grad():
        ids, mask, pixels, sizes = (torch.from_numpy(inputs[key]) for key in (
            "input_ids", "attention_mask", "pixel_values", "image_sizes"))
        features = torch.cat(list(hf_model.model.get_image_features(
            pixel_values=pixels, image_sizes=sizes).pooler_output))
        embeds = hf_model.get_input_embeddings()(ids)
        placeholder = hf_model.model.get_placeholder_mask(ids, inputs_embeds=embeds,
                                                          image_features=features)
        merged = embeds.masked_scatter(placeholder, features)
        positions = torch.from_numpy(position_ids_for(inputs["attention_mask"], ids.shape[1]))
        out = hf_model(input_ids=ids, pixel_values=pixels, image_sizes=sizes, attention_mask=mask,
                       position_ids=positions, use_cache=True)
        logits = [out.logits.numpy()]
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        for token in tokens:
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
            positions = torch.from_numpy(position_ids_for(mask.numpy(), 1))
            out = hf_model(input_ids=torch.from_numpy(token), attention_mask=mask,
                           position_ids=positions, use_cache=True, cache=cache)
            cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
            logits.append(out.logits.numpy())
    return features.numpy(), merged.numpy(), logits


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
    assert float(np.abs(hf_features).mean()) > 0.1  # O(1) features: the image steers the text


def test_cpu_build_matches_default_build_and_fuses_gqa_in_the_decoder_only(checkpoint, tmp_path):
    """cpu: GroupQueryAttention in the decoder only; same features, tokens and logits as
    the default build and as transformers (decode steps on an unpadded batch, the
    prefill alone on a left-padded one, as llava_parity_test: ORT's GQA rotates a
    left-padded row's decode steps itself)."""
    folder, hf_model = checkpoint("default")
    default = build_and_load(folder, tmp_path / "default", "default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    gqa = {key: sum(1 for n in model.graph if f"{n.domain}::{n.op_type}" == GQA)
           for key, model in cpu.package.models.items()}
    assert gqa == {"vision": 0, "embedding": 0, "model": cpu.config.num_hidden_layers}
    for pad, steps in ((0, STEPS), (PAD, 0)):
        inputs = make_inputs(hf_model, seed=1, pad=pad)
        ref_features, ref_embeds, ref_logits, tokens = default.generate(inputs, steps)
        features, embeds, logits, cpu_tokens = cpu.generate(inputs, steps)
        assert float(np.abs(features - ref_features).max()) <= F32_TOLERANCE
        assert float(np.abs(embeds - ref_embeds).max()) <= F32_TOLERANCE
        assert [t.tolist() for t in cpu_tokens] == [t.tolist() for t in tokens]
        diff = compare_logits(logits, ref_logits, inputs["attention_mask"])
        assert diff <= F32_TOLERANCE, f"pad {pad}: {diff:.3g}"
        _, _, hf_logits = hf_reference(hf_model, inputs, cpu_tokens)  # and vs transformers
        diff = compare_logits(logits, hf_logits, inputs["attention_mask"])
        assert diff <= F32_TOLERANCE, f"pad {pad}, cpu vs transformers: {diff:.3g}"


def _in_memory_layout(name: str) -> str:  # transformers 5's module names
    for old, new in (("language_model.model.", "model.language_model."),
                     ("language_model.lm_head.", "lm_head."),
                     ("vision_tower.", "model.vision_tower."),
                     ("multi_modal_projector.", "model.multi_modal_projector.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


def test_transformers_5_module_names_load_the_same_weights(checkpoint, tmp_path):
    folder, hf_model = checkpoint("default")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), _in_memory_layout)
    inputs = make_inputs(hf_model)
    reference = build_and_load(folder, tmp_path / "a").generate(inputs, steps=1)
    other = build_and_load(renamed, tmp_path / "b").generate(inputs, steps=1)
    for a, b in zip(reference[:3], other[:3]):
        for x, y in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            np.testing.assert_array_equal(x, y)


def test_hub_config_without_tie_key_reads_the_checkpoint_head(checkpoint, tmp_path):
    """Hub checkpoints saved by transformers 4.x name no tie_word_embeddings (Mistral3Config's
    default: true) but hold their own lm_head: transformers 5 then keeps that head, and so
    does the package."""
    import json
    import shutil

    folder, _ = checkpoint("default")
    hub = str(tmp_path / "hub")
    shutil.copytree(folder, hub)
    with open(os.path.join(hub, "config.json")) as f:
        config = json.load(f)
    config.pop("tie_word_embeddings")
    config["text_config"].pop("tie_word_embeddings", None)
    with open(os.path.join(hub, "config.json"), "w") as f:
        json.dump(config, f)
    hf_model = load_hf_model(hub)
    assert hf_model.config.tie_word_embeddings
    pkg = build_and_load(hub, tmp_path / "pkg")
    inputs = make_inputs(hf_model)
    _, _, steps, tokens = pkg.generate(inputs, steps=1)
    _, _, hf_steps = hf_reference(hf_model, inputs, tokens)
    diff = compare_logits(steps, hf_steps, inputs["attention_mask"])
    assert diff <= F32_TOLERANCE, f"logits {diff:.3g}"


def test_odd_patch_grids_drop_the_trailing_row_and_column_as_transformers(checkpoint, tmp_path):
    """A 20 x 36 px image is 5 x 9 patches: the 2 x 2 merger (transformers' unfold) drops
    the last patch row and column; the vision model does the same."""
    folder, hf_model = checkpoint("default")
    pkg = build_and_load(folder, tmp_path / "pkg")
    images, padded, sizes = make_images(hf_model.config, [(20, 36)], np.random.default_rng(5))
    with torch.no_grad():
        hf_features = torch.cat(list(hf_model.model.get_image_features(
            pixel_values=torch.from_numpy(padded), image_sizes=torch.from_numpy(sizes))
            .pooler_output)).numpy()
    features = pkg.image_features(images)
    assert features.shape == hf_features.shape == (2 * 4, hf_model.config.text_config.hidden_size)
    assert float(np.abs(features - hf_features).max()) <= F32_TOLERANCE
