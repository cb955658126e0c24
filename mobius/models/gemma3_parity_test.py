"""L3: the three-model Gemma 3 package vs transformers' Gemma3ForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-gemma3-vl preset plus
per-case overrides, every parameter random and the projection scaled so image
features are O(1) (testing/gemma3_checkpoints.py). One batch of 2 prompts -- row 0
with two images, row 1 with one, left-padded by 3 -- runs through the package as
onnxruntime-genai chains it (vision -> embedding -> decoder, which also reads
input_ids; then 3 greedy decode steps through the embedding model with zero image
features and the presents fed back) and through transformers with its own cache,
given token_type_ids in the prefill as its processor makes them. Compared to 1e-4:
image features, merged embeddings (exactly, on transformers' own features) and the
logits of every step. transformers without token_type_ids (causal only) must differ:
the bidirectional image blocks are what the decoder's input_ids are for.
"""

from __future__ import annotations

import numpy as np
import pytest

import torch

from mobius.builder import build
from testing.gemma3_checkpoints import make_gemma3_checkpoint
from testing.hf_checkpoints import load_hf_model, renamed_checkpoint
from testing.parity import compare_logits, position_ids_for
from testing.vlm_sessions import Sessions, assert_chain_matches

F32_TOLERANCE = 1e-4
STEPS, PAD = 3, 3

_GEMMA3_4X_TEXT = {  # transformers 4.x spellings: one rope_theta + rope_local_base_freq,
    "rope_parameters": None, "rope_theta": 50000.0, "rope_local_base_freq": 500.0,  # linear
    "rope_scaling": {"rope_type": "linear", "factor": 2.0},  # scaling on global layers only
    "layer_types": None, "sliding_window_pattern": 2, "sliding_window": 9,
}

# name: (tiny-gemma3-vl overrides, text_config overrides)
CASES = {
    "pooled_16_tokens": ({"mm_tokens_per_image": 16}, {}),  # 16 x 16 patches -> 4 x 4 tokens
    "unpooled_256_tokens": ({}, {"max_position_embeddings": 1024}),  # genai's token count
    "gemma3_4x_text_config": ({"mm_tokens_per_image": 64}, _GEMMA3_4X_TEXT),
    "untied_head": ({"mm_tokens_per_image": 16, "tie_word_embeddings": False},
                    {"tie_word_embeddings": False}),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            from mobius.tiny.presets import TINY_PRESETS

            overrides, text = CASES[name]
            text_config = {**TINY_PRESETS["tiny-gemma3-vl"]["text_config"], **text}
            text_config = {k: v for k, v in text_config.items() if v is not None}
            folder = str(tmp_path_factory.mktemp(name) / "ckpt")
            make_gemma3_checkpoint(folder, text_config=text_config, **overrides)
            made[name] = folder, load_hf_model(folder)
        return made[name]

    return get


class Package(Sessions):
    """The saved package's three onnxruntime sessions, chained as genai runs them; the
    decoder reads its token ids beside inputs_embeds."""

    def step(self, input_ids, embeds, attention_mask, position_ids, past):
        return self.decode(embeds, attention_mask, position_ids, past, {"input_ids": input_ids})

    def generate(self, input_ids, attention_mask, pixel_values):
        """(image_features, prefill inputs_embeds, per-step logits, greedy tokens)."""
        features = self.vision.run(None, {"pixel_values": pixel_values})[0]
        embeds = self.embed(input_ids, features)
        return (features, embeds, *self.greedy(input_ids, embeds, attention_mask, STEPS))


def make_inputs(hf_model, seed=0):
    """Row 0: two images, row 1: one image, left-padded by PAD; their pixel_values."""
    config = hf_model.config
    vision, image = config.vision_config, config.image_token_index
    tokens = config.mm_tokens_per_image
    rng = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in rng.integers(4, config.boi_token_index, size=n)]  # noqa: E731
    row0 = text(2) + [image] * tokens + text(1) + [image] * tokens + text(2)
    row1 = [0] * PAD + text(2) + [image] * tokens + text(len(row0) - PAD - 2 - tokens)
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :PAD] = 0
    pixel_values = rng.standard_normal((3, vision.num_channels, vision.image_size,
                                        vision.image_size)).astype(np.float32)
    return input_ids, attention_mask, pixel_values


def hf_reference(hf_model, input_ids, attention_mask, pixel_values, tokens, token_types=True):
    """transformers' image features, merged embeddings and per-step logits."""
    with torch.no_grad():
        ids, mask = torch.from_numpy(input_ids), torch.from_numpy(attention_mask)
        pixels = torch.from_numpy(pixel_values)
        features = hf_model.model.get_image_features(pixel_values=pixels).pooler_output
        features = features.reshape(-1, features.shape[-1])
        embeds = hf_model.get_input_embeddings()(ids)
        placeholder = hf_model.model.get_placeholder_mask(ids, inputs_embeds=embeds,
                                                          image_features=features)
        merged = embeds.masked_scatter(placeholder, features)
        types = {"token_type_ids": (ids == hf_model.config.image_token_index).long()}
        out = hf_model(input_ids=ids, pixel_values=pixels, attention_mask=mask, use_cache=True,
                       position_ids=torch.from_numpy(position_ids_for(attention_mask, ids.shape[1])),
                       **(types if token_types else {}))
        logits, cache = [out.logits.numpy()], out.cache
        for token in tokens:
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
            out = hf_model(input_ids=torch.from_numpy(token), attention_mask=mask, cache=cache,
                           position_ids=torch.from_numpy(position_ids_for(mask.numpy(), 1)),
                           use_cache=True)
            cache = out.cache
            logits.append(out.logits.numpy())
    return features.numpy(), merged.numpy(), logits


PARAMS = [(name, "default") for name in sorted(CASES)] + [("pooled_16_tokens", "cpu")]


@pytest.mark.parametrize("name,ep", PARAMS, ids=[f"{n}-{e}" for n, e in PARAMS])
def test_f32_parity(name, ep, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    package = build(folder, execution_provider=ep, dtype="f32")
    pkg = Package(package.save(str(tmp_path / "pkg")), package.config)
    input_ids, attention_mask, pixel_values = make_inputs(hf_model)
    features, embeds, steps, tokens = pkg.generate(input_ids, attention_mask, pixel_values)
    hf_features, hf_merged, hf_steps = hf_reference(hf_model, input_ids, attention_mask,
                                                    pixel_values, tokens)

    assert_chain_matches(pkg, input_ids, attention_mask, (features, embeds, steps),
                         (hf_features, hf_merged, hf_steps), F32_TOLERANCE, name)
    if ep == "default":  # the image blocks' two-way attention is what the decoder adds
        causal = hf_reference(hf_model, input_ids, attention_mask, pixel_values, tokens,
                              token_types=False)[2]
        assert compare_logits(steps, causal, attention_mask) > 100 * F32_TOLERANCE


def _hub_layout(name: str) -> str:  # google/gemma-3-*: SiglipVisionModel's vision_model level
    return name.replace("vision_tower.", "vision_tower.vision_model.", 1)


def _in_memory_layout(name: str) -> str:  # transformers 5's module names
    for old, new in (("language_model.model.", "model.language_model."),
                     ("vision_tower.", "model.vision_tower."),
                     ("multi_modal_projector.", "model.multi_modal_projector.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


@pytest.mark.parametrize("layout", [_hub_layout, _in_memory_layout], ids=lambda f: f.__name__)
def test_other_checkpoint_spellings_load_the_same_weights(layout, checkpoint, tmp_path):
    folder, hf_model = checkpoint("pooled_16_tokens")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), layout)
    runs = []
    for name, source in (("a", folder), ("b", renamed)):
        package = build(source, execution_provider="default", dtype="f32")
        pkg = Package(package.save(str(tmp_path / name)), package.config)
        runs.append(pkg.generate(*make_inputs(hf_model)))
    for a, b in zip(runs[0][2], runs[1][2]):
        np.testing.assert_array_equal(a, b)
