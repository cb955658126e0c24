"""L3: the three-model LFM2-VL package vs transformers' Lfm2VlForConditionalGeneration, f32.

A batch of 2 prompts (row 1 left-padded by 3), each with one image of its own size
(4 x 6 and 2 x 4 patches, padded to one patch count as the processor pads them), runs
through the package as onnxruntime-genai chains it -- vision -> embedding -> decoder,
then 3 decode steps feeding the greedy token through the embedding model (zero image
features) and every present.* back as past_key_values.* (the conv layers' states and
the attention layer's KV cache) -- and through transformers with its cache. Compared,
each to 1e-4: image_features vs ``get_image_features`` (resized positions, padding
mask, pixel unshuffle, projector), the merged embeddings and the logits of the prefill
(real positions) and every decode step. Each config switch has a case that changes
the output.
"""

from __future__ import annotations

import numpy as np
import pytest

import torch

from mobius.builder import build
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.tiny.presets import TINY_PRESETS
from testing.hf_checkpoints import checkpoint_cases, renamed_checkpoint
from testing.lfm2_vl_checkpoints import (image_tokens, make_lfm2_vl_checkpoint,
                                         make_patches)
from testing.vlm_sessions import Sessions, assert_chain_matches

F32_TOLERANCE = 1e-4
STEPS, PAD = 3, 3
GRIDS = [(4, 6), (2, 4)]

# name: tiny-lfm2-vl overrides (each changes the output where the default would not)
_VISION = TINY_PRESETS["tiny-lfm2-vl"]["vision_config"]
CASES = {
    "default": {},  # 2 x 2 unshuffle, layer norm, gelu, biased projector, tied head
    "factor1": {"downsample_factor": 1},
    "projector_relu": {"projector_hidden_act": "relu"},
    "projector_no_bias": {"projector_bias": False},
    "projector_no_layernorm": {"projector_use_layernorm": False},
    "untied": {"tie_word_embeddings": False},
    # a 3 x 3 position grid; the MAP head is saved and left unread
    "vision_grid3_head": {"vision_config": {**_VISION, "num_patches": 9,
                                            "vision_use_head": True}},
    "vision_relu": {"vision_config": {**_VISION, "hidden_act": "relu"}},
    "vision_eps": {"vision_config": {**_VISION, "layer_norm_eps": 1e-1}},
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return checkpoint_cases(tmp_path_factory,
                            lambda folder, name: make_lfm2_vl_checkpoint(folder, **CASES[name]))


class Package(Sessions):
    """The saved package's three onnxruntime sessions; the decoder's state is its conv
    states beside the KV caches."""

    def __init__(self, path: str, package):
        super().__init__(path, package.config)
        self.package = package
        self.past = [i for i in self.decoder.get_inputs() if i.name.startswith("past_")]

    def image_features(self, inputs):
        names = ("pixel_values", "pixel_attention_mask", "spatial_shapes")
        return self.vision.run(None, {n: inputs[n] for n in names})[0]

    def decode(self, embeds, attention_mask, position_ids, past):
        feeds = {"inputs_embeds": embeds, "attention_mask": attention_mask,
                 "position_ids": position_ids}
        for spec in self.past:  # conv states [batch, hidden, L - 1]; KV [batch, kv, 0, d]
            dims = [embeds.shape[0]] + [0 if isinstance(d, str) else d for d in spec.shape[1:]]
            feeds[spec.name] = past[spec.name] if past else np.zeros(dims, np.float32)
        names = [o.name for o in self.decoder.get_outputs()]
        out = dict(zip(names, self.decoder.run(None, feeds)))
        presents = {k.replace("present.", "past_key_values.", 1): v
                    for k, v in out.items() if k.startswith("present.")}
        return out["logits"], presents

    def generate(self, inputs, steps=STEPS):
        """(image_features, prefill inputs_embeds, per-step logits, greedy tokens)."""
        features = self.image_features(inputs)
        embeds = self.embed(inputs["input_ids"], features)
        return (features, embeds, *self.greedy(inputs["input_ids"], embeds,
                                               inputs["attention_mask"], steps,
                                               inputs["position_ids"]))


def build_and_load(folder, out_dir, ep="default") -> Package:
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    return Package(package.save(str(out_dir), overwrite=True), package)


def make_inputs(hf_model, seed=0, pad=PAD) -> dict:
    """Two prompts with one image each (row 1 left-padded by ``pad``), their patches and
    position ids (0 at the first real token)."""
    config = hf_model.config
    rng = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in rng.integers(4, config.image_token_id - 2, size=n)]  # noqa: E731
    factor = config.downsample_factor
    spans = [[config.image_token_id] * image_tokens(grid, factor) for grid in GRIDS]
    row0 = text(2) + spans[0] + text(3)
    row1 = [0] * pad + text(3) + spans[1] + text(len(row0) - pad - 3 - len(spans[1]))
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    positions = np.maximum(np.cumsum(attention_mask, axis=1) - 1, 0)
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": positions.astype(np.int64), **make_patches(config, GRIDS, rng)}


def hf_reference(hf_model, inputs, tokens):
    """transformers' image features, merged embeddings and per-step logits."""
    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    vision = {k: t[k] for k in ("pixel_values", "pixel_attention_mask", "spatial_shapes")}
    with torch.no_grad():
        features = torch.cat(list(hf_model.model.get_image_features(**vision).pooler_output))
        embeds = hf_model.get_input_embeddings()(t["input_ids"])
        placeholder = hf_model.model.get_placeholder_mask(t["input_ids"], embeds, features)
        merged = embeds.masked_scatter(placeholder, features)
        out = hf_model(input_ids=t["input_ids"], attention_mask=t["attention_mask"],
                       position_ids=t["position_ids"], use_cache=True, **vision)
        logits, mask = [out.logits.numpy()], t["attention_mask"]
        cache = getattr(out, "cache", None) or out.past_key_values
        for step, token in enumerate(tokens):
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
            positions = t["position_ids"][:, -1:] + 1 + step
            out = hf_model(input_ids=torch.from_numpy(token), attention_mask=mask,
                           position_ids=positions, use_cache=True, cache=cache)
            cache = getattr(out, "cache", None) or out.past_key_values
            logits.append(out.logits.numpy())
    return features.numpy(), merged.numpy(), logits


def _check(pkg, hf_model, inputs, name, steps=STEPS):
    features, embeds, steps, tokens = pkg.generate(inputs, steps)
    hf_features, hf_merged, hf_steps = hf_reference(hf_model, inputs, tokens)
    assert_chain_matches(pkg, inputs["input_ids"], inputs["attention_mask"],
                         (features, embeds, steps), (hf_features, hf_merged, hf_steps),
                         F32_TOLERANCE, name, exact_merge=False)
    return features, steps


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_parity(name, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    features, steps = _check(build_and_load(folder, tmp_path / "pkg"), hf_model,
                             make_inputs(hf_model), name)
    if name != "default":  # the switch changes the output
        _, default_model = checkpoint("default")
        default_features, _, default_steps = hf_reference(default_model,
                                                          make_inputs(default_model), [])
        same_shape = features.shape == default_features.shape  # else other token counts
        moved = max(float(np.abs(steps[0] - default_steps[0]).max()),
                    float(np.abs(features - default_features).max())) if same_shape else np.inf
        assert moved > 10 * F32_TOLERANCE, f"{name}: the switch moved the output {moved:.3g}"


def test_cpu_ep_matches_transformers(checkpoint, tmp_path):
    """cpu: the fused graphs (GroupQueryAttention with RoPE inside), same parity: the
    left-padded batch over the prefill, an unpadded one over every step (ORT's GQA kernel
    rotates a left-padded row's decode steps by cache slot, as for text-only LFM2:
    mobius/models/lfm2_families_test.py)."""
    folder, hf_model = checkpoint("default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    gqa = sum(n.op_type == "GroupQueryAttention" for n in cpu.package.models["model"].graph)
    assert gqa == 1  # the one attention layer
    for pad, steps in ((0, STEPS), (PAD, 0)):
        _check(cpu, hf_model, make_inputs(hf_model, seed=1, pad=pad), f"cpu pad {pad}", steps)


def test_bad_configs_are_refused(tmp_path):
    from mobius.models.lfm2_vl import FAMILY, Lfm2VlForConditionalGeneration, normalize_lfm2_vl

    base = TINY_PRESETS["tiny-lfm2-vl"]
    with pytest.raises(UnsupportedModelError, match="siglip2_vision_model"):
        normalize_lfm2_vl({**base, "vision_config": {"model_type": "siglip_vision_model"}})
    with pytest.raises(UnsupportedModelError, match="lfm2"):
        normalize_lfm2_vl({**base, "text_config": {"model_type": "llama"}})
    with pytest.raises(UnsupportedModelError, match="use_image_special_tokens"):
        normalize_lfm2_vl({**base, "use_image_special_tokens": False})
    for bad, match in (({"image_token_id": 5000}, "outside the vocabulary"),
                       ({"downsample_factor": 0}, "downsample_factor"),
                       ({"vision_config": {**base["vision_config"], "num_patches": 15}},
                        "positive square")):
        with pytest.raises(ConfigError, match=match):
            Lfm2VlForConditionalGeneration(FAMILY.make_config({**base, **bad}))


#: transformers 5's saved names -> the older spellings (vision_model. inside the tower,
#: language_model.model. / language_model.lm_head. / multi_modal_projector. at the top)
_OLDER = (("model.vision_tower.", "model.vision_tower.vision_model."),
          ("model.language_model.", "language_model.model."),
          ("model.multi_modal_projector.", "multi_modal_projector."),
          ("lm_head.", "language_model.lm_head."))


def _older_layout(name: str) -> str:
    for new, old in _OLDER:
        if name.startswith(new):
            return old + name[len(new):]
    return name


def test_older_checkpoint_names_load_the_same_weights(checkpoint, tmp_path):
    folder, hf_model = checkpoint("untied")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), _older_layout,
                                 "model.vision_tower.")  # what 5.x saves
    inputs = make_inputs(hf_model)
    reference = build_and_load(folder, tmp_path / "a").generate(inputs, steps=1)
    other = build_and_load(renamed, tmp_path / "b").generate(inputs, steps=1)
    np.testing.assert_array_equal(reference[0], other[0])
    for a, b in zip(reference[2], other[2]):
        np.testing.assert_array_equal(a, b)
