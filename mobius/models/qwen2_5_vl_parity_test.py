"""L3: the three-model Qwen2.5-VL package vs transformers' Qwen2_5_VLForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-qwen2_5_vl preset plus
per-case overrides (testing/qwen2_5_vl_checkpoints.py). One batch of 2 prompts
with one 6 x 10-patch image each (row 1 left-padded by 3) runs through the
package as onnxruntime-genai chains it -- vision -> embedding -> decoder, then
3 decode steps feeding the greedy token through the embedding model (zero image
features) and present.* back as past_key_values.* -- and through transformers.
The prefill's 3-D position ids are transformers' own (``get_rope_index``: text,
then the image's (t, h, w) grid, then text resuming after the grid's largest
side); each decode step continues every stream at the row's last position + 1.
Compared, each to 1e-4: image_features vs ``get_image_features`` (window and
full-attention layers, 2-D rotary, merger), the merged embeddings, and the
logits of the prefill (real positions) and every decode step.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mobius.builder import build  # noqa: E402
from testing.hf_checkpoints import load_hf_model  # noqa: E402
from testing.model_runs import ort_session  # noqa: E402
from testing.parity import compare_logits  # noqa: E402
from testing.qwen2_5_vl_checkpoints import (GRID, image_span, make_pixels,  # noqa: E402
                                            make_qwen2_5_vl_checkpoint)

F32_TOLERANCE = 1e-4
STEPS, PAD = 3, 3
GQA = "com.microsoft::GroupQueryAttention"

_VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 40, "num_heads": 2,
           "in_channels": 3, "patch_size": 4, "spatial_merge_size": 2,
           "temporal_patch_size": 2, "out_hidden_size": 64, "tokens_per_second": 4,
           "hidden_act": "silu", "model_type": "qwen2_5_vl_vision"}

# name: tiny-qwen2_5_vl overrides (each changes the output where the default would not)
CASES = {
    "default": {},  # M-RoPE sections 2/3/3, layer 1 full attention, 2 x 2 merged-token windows
    "sections_full_first_small_windows": {
        "vision_config": {**_VISION, "window_size": 8, "fullatt_block_indexes": [0]},
    },
    "tied": {"tie_word_embeddings": True},
}
_SECTIONS = [4, 2, 2]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            folder = str(tmp_path_factory.mktemp(name) / "ckpt")
            overrides = dict(CASES[name])
            if name == "sections_full_first_small_windows":
                from mobius.tiny.presets import TINY_PRESETS

                text = dict(TINY_PRESETS["tiny-qwen2_5_vl"]["text_config"])
                text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": _SECTIONS}
                overrides["text_config"] = text
            make_qwen2_5_vl_checkpoint(folder, **overrides)
            made[name] = folder, load_hf_model(folder)
        return made[name]

    return get


class Package:
    """The saved package's three onnxruntime sessions."""

    def __init__(self, path: str, package):
        self.path, self.package, self.config = path, package, package.config
        self.vision = ort_session(os.path.join(path, "vision.onnx"))
        self.embedding = ort_session(os.path.join(path, "embedding.onnx"))
        self.decoder = ort_session(os.path.join(path, "model.onnx"))

    def image_features(self, pixel_values, image_grid_thw):
        return self.vision.run(None, {"pixel_values": pixel_values,
                                      "image_grid_thw": image_grid_thw})[0]

    def embed(self, input_ids, image_features):
        return self.embedding.run(None, {"input_ids": input_ids,
                                         "image_features": image_features})[0]

    def decode(self, embeds, attention_mask, position_ids, past):
        config = self.config
        feeds = {"inputs_embeds": embeds, "attention_mask": attention_mask,
                 "position_ids": position_ids}
        for i in range(config.num_hidden_layers):
            for j, kind in enumerate(("key", "value")):
                feeds[f"past_key_values.{i}.{kind}"] = past[i][j] if past else np.zeros(
                    (embeds.shape[0], config.num_key_value_heads, 0, config.head_dim), np.float32)
        names = [o.name for o in self.decoder.get_outputs()]
        out = dict(zip(names, self.decoder.run(None, feeds)))
        presents = [(out[f"present.{i}.key"], out[f"present.{i}.value"])
                    for i in range(config.num_hidden_layers)]
        return out["logits"], presents

    def generate(self, inputs, steps=STEPS):
        """(image_features, prefill inputs_embeds, per-step logits, greedy tokens)."""
        features = self.image_features(inputs["pixel_values"], inputs["image_grid_thw"])
        embeds = self.embed(inputs["input_ids"], features)
        mask, positions = inputs["attention_mask"], inputs["position_ids"]
        logits, past = self.decode(embeds, mask, positions, None)
        steps_logits, tokens = [logits], []
        no_features = np.zeros((0, self.config.hidden_size), np.float32)
        for step in range(steps):
            token = steps_logits[-1][:, -1].argmax(-1)[:, None].astype(np.int64)
            tokens.append(token)
            mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
            logits, past = self.decode(self.embed(token, no_features), mask,
                                       decode_positions(positions, step), past)
            steps_logits.append(logits)
        return features, embeds, steps_logits, tokens


def decode_positions(prefill_positions: np.ndarray, step: int) -> np.ndarray:
    """[3, batch, 1]: every stream continues at the row's last prefill position + 1 + step
    (the last prompt token is text, so its three streams agree)."""
    return prefill_positions[:, :, -1:] + 1 + step


def build_and_load(folder, out_dir, ep="default") -> Package:
    package = build(folder, execution_provider=ep, dtype="f32")
    return Package(package.save(str(out_dir), overwrite=True), package)


def make_inputs(hf_model, seed=0, pad=PAD) -> dict:
    """Two prompts with one image each (row 1 left-padded by ``pad`` <= 3), their
    patches and grids, and transformers' 3-D position ids for them."""
    config = hf_model.config
    rng = np.random.default_rng(seed)
    text = lambda n: [int(t) for t in rng.integers(4, config.vision_start_token_id - 1, size=n)]  # noqa: E731
    row0 = text(2) + image_span(config) + text(3)
    row1 = [0] * pad + text(1) + image_span(config) + text(4 - pad)
    input_ids = np.array([row0, row1], dtype=np.int64)
    attention_mask = np.ones_like(input_ids)
    attention_mask[1, :pad] = 0
    pixel_values, grid = make_pixels(config, [GRID, GRID], rng)
    with torch.no_grad():
        ids = torch.from_numpy(input_ids)
        positions, _ = hf_model.model.get_rope_index(
            ids, (ids == config.image_token_id).int(), torch.from_numpy(grid),
            attention_mask=torch.from_numpy(attention_mask))
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "pixel_values": pixel_values, "image_grid_thw": grid,
            "position_ids": positions.numpy().astype(np.int64)}


def hf_reference(hf_model, inputs, tokens):
    """transformers' image features, merged embeddings and per-step logits."""
    with torch.no_grad():
        ids, mask = torch.from_numpy(inputs["input_ids"]), torch.from_numpy(inputs["attention_mask"])
        pixels, grid = torch.from_numpy(inputs["pixel_values"]), torch.from_numpy(inputs["image_grid_thw"])
        features = torch.cat(list(hf_model.model.get_image_features(pixels, grid).pooler_output))
        embeds = hf_model.get_input_embeddings()(ids)
        placeholder, _ = hf_model.model.get_placeholder_mask(ids, inputs_embeds=embeds,
                                                             image_features=features)
        merged = embeds.masked_scatter(placeholder, features)
        out = hf_model(input_ids=ids, pixel_values=pixels, image_grid_thw=grid,
                       attention_mask=mask, mm_token_type_ids=(ids == hf_model.config.image_token_id).int(),
                       use_cache=True)
        logits = [out.logits.numpy()]
        cache = getattr(out, "cache", None) or out.past_key_values
        for step, token in enumerate(tokens):
            mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype)], dim=1)
            positions = torch.from_numpy(decode_positions(inputs["position_ids"], step))
            out = hf_model(input_ids=torch.from_numpy(token), attention_mask=mask,
                           position_ids=positions, use_cache=True, cache=cache)
            cache = getattr(out, "cache", None) or out.past_key_values
            logits.append(out.logits.numpy())
    return features.numpy(), merged.numpy(), logits


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_parity(name, checkpoint, tmp_path):
    folder, hf_model = checkpoint(name)
    pkg = build_and_load(folder, tmp_path / "pkg")
    inputs = make_inputs(hf_model)
    features, embeds, steps, tokens = pkg.generate(inputs)
    hf_features, hf_merged, hf_steps = hf_reference(hf_model, inputs, tokens)

    assert features.shape == hf_features.shape
    vision_diff = float(np.abs(features - hf_features).max())
    assert vision_diff <= F32_TOLERANCE, f"{name}: vision {vision_diff:.3g}"
    np.testing.assert_array_equal(pkg.embed(inputs["input_ids"], hf_features), hf_merged)
    embeds_diff = float(np.abs(embeds - hf_merged).max())
    assert embeds_diff <= F32_TOLERANCE, f"{name}: embeddings {embeds_diff:.3g}"
    diff = compare_logits(steps, hf_steps, inputs["attention_mask"])
    assert diff <= F32_TOLERANCE, f"{name}: logits {diff:.3g}"


def test_cpu_build_matches_default_build_and_fuses_gqa_in_the_decoder_only(checkpoint, tmp_path):
    """cpu: GroupQueryAttention with M-RoPE applied before it (cos/sin are computed
    in the graph, so the kernel cannot rotate), fused norms; same tokens and logits."""
    folder, hf_model = checkpoint("default")
    default = build_and_load(folder, tmp_path / "default", "default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    layers = cpu.config.num_hidden_layers
    gqa = {key: [n for n in model.graph if f"{n.domain}::{n.op_type}" == GQA]
           for key, model in cpu.package.models.items()}
    assert {key: len(nodes) for key, nodes in gqa.items()} == {
        "vision": 0, "embedding": 0, "model": layers}
    assert all(n.attributes["do_rotary"].value == 0 for n in gqa["model"])
    for pad in (0, PAD):
        inputs = make_inputs(hf_model, seed=1, pad=pad)
        ref_features, ref_embeds, ref_logits, tokens = default.generate(inputs)
        features, embeds, logits, cpu_tokens = cpu.generate(inputs)
        assert float(np.abs(features - ref_features).max()) <= F32_TOLERANCE
        assert float(np.abs(embeds - ref_embeds).max()) <= F32_TOLERANCE
        assert [t.tolist() for t in cpu_tokens] == [t.tolist() for t in tokens]
        diff = compare_logits(logits, ref_logits, inputs["attention_mask"])
        assert diff <= F32_TOLERANCE, f"pad {pad}: {diff:.3g}"


def _in_memory_layout(name: str) -> str:  # transformers 5's module names
    for old, new in (("model.", "model.language_model."), ("visual.", "model.visual.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


def test_transformers_5_module_names_load_the_same_weights(checkpoint, tmp_path):
    import shutil

    from safetensors.numpy import load_file, save_file

    folder, hf_model = checkpoint("default")
    renamed = str(tmp_path / "renamed")
    shutil.copytree(folder, renamed)
    tensors = load_file(os.path.join(folder, "model.safetensors"))
    assert any(k.startswith("visual.") for k in tensors)  # what save_pretrained writes today
    save_file({_in_memory_layout(k): v for k, v in tensors.items()},
              os.path.join(renamed, "model.safetensors"), metadata={"format": "pt"})
    inputs = make_inputs(hf_model)
    reference = build_and_load(folder, tmp_path / "a").generate(inputs, steps=1)
    other = build_and_load(renamed, tmp_path / "b").generate(inputs, steps=1)
    for a, b in zip(reference[:3], other[:3]):
        for x, y in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            np.testing.assert_array_equal(x, y)
