"""L3: the three-model LLaVA package vs transformers' LlavaForConditionalGeneration, f32.

Checkpoints are written by transformers itself from the tiny-llava preset plus
per-case overrides, with random biases and O(1) image features
(testing/llava_checkpoints.py). One batch of 2 prompts, one image
each (row 1 left-padded by 3), is run through the package as onnxruntime-genai
chains it -- vision -> embedding -> decoder, then decode steps that feed the
greedy token through the embedding model (with zero image features) and the
decoder's present.* back as past_key_values.* -- and through transformers
with its own cache. Compared, each to 1e-4:

* vision: image_features vs ``get_image_features(...).pooler_output`` (concatenated);
* embedding: inputs_embeds vs transformers' ``masked_scatter`` merge (fed
  transformers' features, so only the merge is compared: it must be exact);
* decoder: logits over the prefill (real positions) + 3 decode steps vs the full
  transformers forward (pixel_values in), i.e. the whole chain end to end.

Also: the cpu build (GQA, packed QKV, fused norms) agrees with the portable
default build on onnxruntime's CPU EP (like ep/cpu/cpu_parity_test.py: decode
steps on an unpadded batch, the prefill only on a left-padded one, because ORT's
GQA kernel rotates a left-padded row's decode steps wrongly when it applies
RoPE itself), GQA appears in the decoder only, and the checkpoint spellings of
other transformers versions load to the same graph.
"""

from __future__ import annotations

import numpy as np
import pytest

import torch

from mobius.builder import build
from mobius.tiny.presets import TINY_PRESETS
from testing.hf_checkpoints import checkpoint_cases, renamed_checkpoint
from testing.llava_checkpoints import make_llava_checkpoint
from testing.parity import compare_logits, position_ids_for
from testing.vlm_sessions import Sessions, assert_chain_matches

F32_TOLERANCE = 1e-4
STEPS, PAD = 3, 3
GQA = "com.microsoft::GroupQueryAttention"

_QWEN2_TEXT = {k: v for k, v in TINY_PRESETS["tiny-qwen2"].items() if k != "architectures"}

# name: tiny-llava overrides
CASES = {
    "default": {},  # vision_feature_layer -2 (the middle state of 2 layers), CLS dropped
    "full_last_layer": {"vision_feature_layer": -1, "vision_feature_select_strategy": "full"},
    "layer_list": {"vision_feature_layer": [0, -1]},  # two states concatenated: projector in = 96
    "qwen2_text_tied": {"text_config": _QWEN2_TEXT},  # QKV bias, tied embeddings via text_config
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cases(tmp_path_factory,
                            lambda folder, name: make_llava_checkpoint(folder, **CASES[name]))


class Package(Sessions):
    """The saved package's three onnxruntime sessions."""

    def __init__(self, path: str, package):
        super().__init__(path, package.config)
        self.package = package

    def image_features(self, pixel_values):
        return self.vision.run(None, {"pixel_values": pixel_values})[0]

    def generate(self, input_ids, attention_mask, pixel_values, steps=STEPS):
        """(image_features, prefill inputs_embeds, per-step logits, greedy tokens)."""
        features = self.image_features(pixel_values)
        embeds = self.embed(input_ids, features)
        return (features, embeds, *self.greedy(input_ids, embeds, attention_mask, steps))


def build_and_load(folder, out_dir, ep="default") -> Package:
    package = build(folder, execution_provider=ep, dtype="f32")
    return Package(package.save(str(out_dir), overwrite=True), package)


def make_inputs(hf_model, seed=0, pad=PAD):
    """Two prompts with one image each (row 1 left-padded by ``pad`` <= 3) + their pixel_values."""
    config = hf_model.config
    vision = config.vision_config
    tokens = (vision.image_size // vision.patch_size) ** 2
    if config.vision_feature_select_strategy == "full":
        tokens += 1
    image = config.image_token_index
    rng = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in rng.integers(4, image, size=n)]  # noqa: E731
    row0 = text(2) + [image] * tokens + text(3)
    row1 = [0] * pad + text(1) + [image] * tokens + text(4 - pad)
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    pixel_values = rng.standard_normal((2, vision.num_channels, vision.image_size,
                                        vision.image_size)).astype(np.float32)
    return input_ids, attention_mask, pixel_values


def _cache_kwarg(hf_model) -> str:
    import inspect

    params = inspect.signature(hf_model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def hf_reference(hf_model, input_ids, attention_mask, pixel_values, tokens):
    """transformers' image features, merged embeddings and per-step logits."""
    with torch.no_grad():
        ids, mask = torch.from_numpy(input_ids), torch.from_numpy(attention_mask)
        pixels = torch.from_numpy(pixel_values)
        features = torch.cat(list(hf_model.model.get_image_features(pixel_values=pixels)
                                  .pooler_output), dim=0)
        embeds = hf_model.get_input_embeddings()(ids)
        placeholder = hf_model.model.get_placeholder_mask(ids, inputs_embeds=embeds,
                                                          image_features=features)
        merged = embeds.masked_scatter(placeholder, features)
        positions = torch.from_numpy(position_ids_for(attention_mask, input_ids.shape[1]))
        out = hf_model(input_ids=ids, pixel_values=pixels, attention_mask=mask,
                       position_ids=positions, use_cache=True)
        logits = [out.logits.numpy()]
        cache = getattr(out, "cache", None) or out.past_key_values
        for token in tokens:
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
            positions = torch.from_numpy(position_ids_for(mask.numpy(), 1))
            out = hf_model(input_ids=torch.from_numpy(token), attention_mask=mask,
                           position_ids=positions, use_cache=True,
                           **{_cache_kwarg(hf_model): cache})
            cache = getattr(out, "cache", None) or out.past_key_values
            logits.append(out.logits.numpy())
    return features.numpy(), merged.numpy(), logits


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_parity(name, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    pkg = build_and_load(folder, tmp_path / "pkg")
    input_ids, attention_mask, pixel_values = make_inputs(hf_model)
    features, embeds, steps, tokens = pkg.generate(input_ids, attention_mask, pixel_values)
    hf_features, hf_merged, hf_steps = hf_reference(hf_model, input_ids, attention_mask,
                                                    pixel_values, tokens)

    assert_chain_matches(pkg, input_ids, attention_mask, (features, embeds, steps),
                         (hf_features, hf_merged, hf_steps), F32_TOLERANCE, name)


def test_cpu_build_matches_default_build_and_fuses_gqa_in_the_decoder_only(checkpoint, tmp_path):
    folder, hf_model = checkpoint("default")
    default = build_and_load(folder, tmp_path / "default", "default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    layers = cpu.config.num_hidden_layers
    gqa = {key: sum(1 for n in model.graph if f"{n.domain}::{n.op_type}" == GQA)
           for key, model in cpu.package.models.items()}
    assert gqa == {"vision": 0, "embedding": 0, "model": layers}
    assert all(GQA not in {f"{n.domain}::{n.op_type}" for n in m.graph}
               for m in default.package.models.values())
    assert cpu.package.genai_config["search"]["past_present_share_buffer"] is True

    for pad, steps in ((0, STEPS), (PAD, 0)):
        input_ids, attention_mask, pixel_values = make_inputs(hf_model, seed=1, pad=pad)
        ref_features, ref_embeds, ref_logits, tokens = default.generate(
            input_ids, attention_mask, pixel_values, steps)
        features, embeds, logits, cpu_tokens = cpu.generate(input_ids, attention_mask,
                                                            pixel_values, steps)
        assert float(np.abs(features - ref_features).max()) <= F32_TOLERANCE
        assert float(np.abs(embeds - ref_embeds).max()) <= F32_TOLERANCE
        assert [t.tolist() for t in cpu_tokens] == [t.tolist() for t in tokens]
        diff = compare_logits(logits, ref_logits, attention_mask)
        assert diff <= F32_TOLERANCE, f"pad {pad}: {diff:.3g}"


def _hub_layout(name: str) -> str:  # llava-hf checkpoints: CLIPVisionModel's vision_model level
    return name.replace("vision_tower.", "vision_tower.vision_model.", 1)


def _in_memory_layout(name: str) -> str:  # transformers 5's module names
    for old, new in (("language_model.model.", "model.language_model."),
                     ("language_model.lm_head.", "lm_head."),
                     ("vision_tower.", "model.vision_tower."),
                     ("multi_modal_projector.", "model.multi_modal_projector.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


@pytest.mark.parametrize("layout", [_hub_layout, _in_memory_layout], ids=lambda f: f.__name__)
def test_other_checkpoint_spellings_load_the_same_weights(layout, checkpoint, tmp_path):
    folder, hf_model = checkpoint("default")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), layout)
    reference = build_and_load(folder, tmp_path / "a")
    other = build_and_load(renamed, tmp_path / "b")
    input_ids, attention_mask, pixel_values = make_inputs(hf_model)
    for a, b in zip(reference.generate(input_ids, attention_mask, pixel_values, steps=1)[:3],
                    other.generate(input_ids, attention_mask, pixel_values, steps=1)[:3]):
        for x, y in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            np.testing.assert_array_equal(x, y)
