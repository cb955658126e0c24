"""L3: the Phi-4-multimodal package (vision / embedding / decoder) vs transformers'
Phi4MultimodalForCausalLM, f32.

Three images of genai's HD form (testing/phi4mm_checkpoints.py): 1 x 2 crops with the
canvas's last columns padding, 2 x 1 crops with its last rows padding (the crop
positions rescale and the tiling cuts to the valid extent), 1 x 1 zero-padded to 3
crops. Row 0 of the batch holds the first two, row 1 the third, left-padded by 3.
The package runs as onnxruntime-genai chains it (vision -> embedding -> decoder, then
3 greedy decode steps through the embedding model with zero image features and the
presents fed back); transformers runs with its own cache. Compared to 1e-4: the merged
embeddings (the image features in place; relative to their size) and the logits of
every step (absolute). Speech: audios of 100 and 70 mel frames (row 1 left-padded),
every speech switch off its default, one audio past transformers' 500-position chunk,
and an image + audio prompt (the vision-speech projections, genai's mode 3). A random
PEFT LoRA on the decoder projections (as the released vision-lora) merged by
``build(adapter=...)`` matches transformers with peft's merge and changes the logits.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import torch

from mobius.builder import build
from testing.model_runs import ort_session
from testing.parity import compare_logits, position_ids_for
from testing.phi4mm_checkpoints import (audio_inputs, hd_inputs, load_phi4mm,
                                        make_phi4mm_checkpoint)
from testing.vlm_sessions import Sessions

F32_TOLERANCE = 1e-4
STEPS, PAD = 3, 3
GRIDS = [(1, 2, 0, 5), (2, 1, 7, 0), (1, 1, 0, 0)]  # (rows, cols, padded rows, padded cols)

_LONGROPE = {"rope_parameters": {
    "rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
    "short_factor": [1.0 + 0.1 * i for i in range(6)],
    "long_factor": [2.0 + 0.5 * i for i in range(6)]},
    "original_max_position_embeddings": 512}

# name: (checkpoint overrides, vision_config overrides)
CASES = {
    "default": ({}, {}),
    # both tower layers; exact-GELU tower MLPs
    "feature_layer_last": ({}, {"feature_layer": -1, "hidden_act": "gelu"}),
    "longrope_long_prompt": (_LONGROPE, {}),  # prompts past 512: the long factors
    "sliding_window": ({"sliding_window": 200}, {}),  # prompts of ~1500 tokens
    "full_rotary_tied": ({"rope_parameters": {"rope_type": "default", "rope_theta": 500.0},
                          "tie_word_embeddings": True}, {}),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            overrides, vision = CASES[name]
            folder = str(tmp_path_factory.mktemp(name) / "ckpt")
            make_phi4mm_checkpoint(folder, vision=vision, **overrides)
            made[name] = folder, load_phi4mm(folder)
        return made[name]

    return get


class Package(Sessions):
    """The saved package's three onnxruntime sessions, chained as genai runs them."""

    def embed(self, input_ids, features, audio=None):
        feeds = {"input_ids": input_ids, "image_features": features}
        if "audio_features" in {i.name for i in self.embedding.get_inputs()}:
            feeds["audio_features"] = self.no_features() if audio is None else audio
        return self.embedding.run(None, feeds)[0]

    def generate(self, input_ids, attention_mask, pixels=None, sizes=None, mask=None,
                 audio=None):
        """(image features, prefill inputs_embeds, per-step logits, greedy tokens);
        ``audio``: the speech model's feeds."""
        features = self.no_features() if pixels is None else self.vision.run(None, {
            "pixel_values": pixels, "image_sizes": sizes, "image_attention_mask": mask})[0]
        audio_features = None
        if audio is not None:
            speech = ort_session(os.path.join(self.path, "speech.onnx"))
            audio_features = speech.run(None, audio)[0]
        embeds = self.embed(input_ids, features, audio_features)
        return (features, embeds, *self.greedy(input_ids, embeds, attention_mask, STEPS))


def make_inputs(hf_model, seed=0):
    rng = np.random.default_rng(seed)
    pixels, sizes, mask, counts = hd_inputs(GRIDS, rng)
    image = hf_model.config.vision_config.image_token_id
    text = lambda n: [int(t) for t in rng.integers(3, image - 2, size=n)]  # noqa: E731
    row0 = text(2) + [image] * counts[0] + text(1) + [image] * counts[1] + text(2)
    row1 = [0] * PAD + text(2) + [image] * counts[2] + text(len(row0) - PAD - 2 - counts[2])
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :PAD] = 0
    return input_ids, attention_mask, pixels, sizes, mask


def hf_reference(hf_model, input_ids, attention_mask, tokens, **media):
    """transformers' merged embeddings and per-step logits; ``media``: its image /
    audio keyword arguments."""
    media = {k: torch.from_numpy(v) for k, v in media.items()}
    with torch.no_grad():
        ids, attn = torch.from_numpy(input_ids), torch.from_numpy(attention_mask)
        body = hf_model.model
        merged = body.embed_tokens_extend(ids, body.embed_tokens(ids), **media)
        out = hf_model(input_ids=ids, attention_mask=attn, use_cache=True,
                       position_ids=torch.from_numpy(position_ids_for(attention_mask,
                                                                      ids.shape[1])), **media)
        logits, cache = [out.logits.numpy()], out.cache
        for token in tokens:
            attn = torch.cat([attn, torch.ones((attn.shape[0], 1), dtype=attn.dtype)], dim=1)
            out = hf_model(input_ids=torch.from_numpy(token), attention_mask=attn, cache=cache,
                           position_ids=torch.from_numpy(position_ids_for(attn.numpy(), 1)),
                           use_cache=True)
            cache = out.cache
            logits.append(out.logits.numpy())
    return merged.numpy(), logits


def image_media(pixels, sizes, mask):
    return {"image_pixel_values": pixels, "image_sizes": sizes, "image_attention_mask": mask}


def assert_parity(name, embeds, steps, hf_merged, hf_steps, attention_mask):
    # relative: the tower's N(0, 1) attention weights (transformers' init) make image
    # features whose rounding grows with their O(1) size
    embeds_diff = float(np.abs(embeds - hf_merged).max() / np.abs(hf_merged).max())
    assert embeds_diff <= F32_TOLERANCE, f"{name}: embeddings (relative) {embeds_diff:.3g}"
    diff = compare_logits(steps, hf_steps, attention_mask)
    assert diff <= F32_TOLERANCE, f"{name}: logits {diff:.3g}"


PARAMS = [(name, "default") for name in sorted(CASES)] + [("default", "cpu")]


@pytest.mark.parametrize("name,ep", PARAMS, ids=[f"{n}-{e}" for n, e in PARAMS])
def test_f32_parity(name, ep, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    pkg = Package(package.save(str(tmp_path / "pkg")), package.config)
    inputs = make_inputs(hf_model)
    features, embeds, steps, tokens = pkg.generate(*inputs)
    hf_merged, hf_steps = hf_reference(hf_model, *inputs[:2], tokens, **image_media(*inputs[2:]))

    image = hf_model.config.vision_config.image_token_id
    assert features.shape[0] == int((inputs[0] == image).sum())
    assert_parity(name, embeds, steps, hf_merged, hf_steps, inputs[1])


_AUDIO_VARIANTS = {  # every switch of the speech path off its default
    "chunk_size": 4, "left_chunk": 1, "bias_symmetric": True, "bias_max_distance": 50,
    "kernel_size": 5, "depthwise_multiplier": 2, "time_reduction": 4, "activation": "gelu",
    "conv_activation": "relu", "conv_glu_type": "silu", "nemo_activation": "silu"}
# name: (audio_config overrides, mel frames per row, with an image in row 0)
AUDIO_CASES = {
    "speech": ({}, [100, 70], False),
    "speech_variants": (_AUDIO_VARIANTS, [100, 70], False),
    "speech_past_500_positions": ({}, [4100], False),  # 2 chunks (transformers: 1 audio)
    "image_and_speech": ({}, [100, 70], True),  # the vision-speech projections
}
AUDIO_PARAMS = [(name, "default") for name in sorted(AUDIO_CASES)] + [("speech", "cpu")]


def audio_prompt(hf_model, counts, images, rng):
    """Row i holds audio i (row 0 also the images' tokens), rows after 0 left-padded."""
    config = hf_model.config
    image, audio = config.vision_config.image_token_id, config.audio_config.audio_token_id
    text = lambda n: [int(t) for t in rng.integers(3, image - 2, size=n)]  # noqa: E731
    rows = [text(2) + [image] * sum(images) + text(1) + [audio] * counts[0] + text(2)]
    for count in counts[1:]:
        rows.append([0] * PAD + text(2) + [audio] * count)
    width = max(len(r) for r in rows)
    rows = [r + text(width - len(r)) for r in rows]
    input_ids = np.array(rows, dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1:, :PAD] = 0
    return input_ids, attention_mask


@pytest.mark.parametrize("name,ep", AUDIO_PARAMS, ids=[f"{n}-{e}" for n, e in AUDIO_PARAMS])
def test_f32_speech_parity(name, ep, tmp_path):
    overrides, frames, with_image = AUDIO_CASES[name]
    folder = make_phi4mm_checkpoint(str(tmp_path / "ckpt"), audio_config=overrides)
    hf_model = load_phi4mm(folder)
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    pkg = Package(package.save(str(tmp_path / "pkg")), package.config)
    rng = np.random.default_rng(1)
    reduction = hf_model.config.audio_config.time_reduction
    feeds, media = audio_inputs(frames, rng, reduction)
    images = {}
    counts = [0]
    if with_image:
        pixels, sizes, mask, counts = hd_inputs([(1, 1, 0, 0)], rng)
        images = dict(pixels=pixels, sizes=sizes, mask=mask)
        media.update(image_media(pixels, sizes, mask))
        feeds["audio_projection_mode"] = np.array([3], np.int64)  # genai: vision + speech
    input_ids, attention_mask = audio_prompt(hf_model, list(feeds["audio_sizes"]),
                                             counts if with_image else [], rng)
    _, embeds, steps, tokens = pkg.generate(input_ids, attention_mask, **images, audio=feeds)
    hf_merged, hf_steps = hf_reference(hf_model, input_ids, attention_mask, tokens, **media)
    assert_parity(name, embeds, steps, hf_merged, hf_steps, attention_mask)


# the decoder projections the released vision-lora / speech-lora folders target (the
# tower and speech encoder keep their own Linears); a regex as PEFT matches it
LORA_TARGETS = r"model\.layers\.\d+\.(self_attn\.(qkv|o)_proj|mlp\.(gate_up|down)_proj)"


def test_f32_parity_merged_vision_lora(checkpoint, tmp_path):
    """build(adapter=a PEFT LoRA on the decoder) == transformers with peft's merge."""
    import peft

    folder, base_model = checkpoint("default")
    torch.manual_seed(5)  # random A and B (not peft's zero B) so the adapter matters
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS,
                             init_lora_weights=False)
    adapter = str(tmp_path / "vision-lora")
    with_lora = peft.get_peft_model(load_phi4mm(folder), config)
    layers = base_model.config.num_hidden_layers
    assert len(with_lora.base_model.targeted_module_names) == 4 * layers
    with_lora.save_pretrained(adapter)
    merged = with_lora.merge_and_unload().eval()
    inputs = make_inputs(merged)
    runs = {}
    for name, path in (("lora", adapter), ("base", None)):
        package = build(folder, dtype="f32", prefill_logits="all", adapter=path)
        pkg = Package(package.save(str(tmp_path / name)), package.config)
        runs[name] = pkg.generate(*inputs)
    _, embeds, steps, tokens = runs["lora"]
    hf_merged, hf_steps = hf_reference(merged, *inputs[:2], tokens, **image_media(*inputs[2:]))
    assert_parity("vision_lora", embeds, steps, hf_merged, hf_steps, inputs[1])
    base_steps = runs["base"][2]
    assert compare_logits(steps[:1], base_steps[:1], inputs[1]) > 1e-2  # the adapter matters
