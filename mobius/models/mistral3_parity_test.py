"""L3: the three-model Mistral 3 package vs transformers' Mistral3ForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-mistral3 preset plus per-case
overrides (testing/mistral3_checkpoints.py). One batch of 2 prompts, row 0 with a
24 x 40 px image and row 1 (left-padded by 3) with a 16 x 32 px one: transformers
takes both zero-padded to 24 x 40 with ``image_sizes``; the package's vision model
runs once per image on its own pixels, as onnxruntime-genai does. Then embedding
-> decoder and 3 decode steps (transformers' greedy token through the embedding model
with zero image features, present.* back as past_key_values.*); transformers' run is
recorded at build time (mistral3_parity_cases.py). Compared, each to 1e-4:
image_features vs ``get_image_features`` (2-D rotary, patch merger over
non-square grids), the merged embeddings, and the logits of the prefill (real
positions) and every decode step. Each case flips one switch the family reads.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mobius.builder import build
from mobius.models import mistral3_parity_cases as cases
from mobius.models.mistral3_parity_cases import CPU_RUNS, PAD, STEPS
from testing import vlm_reference
from testing.hf_checkpoints import renamed_checkpoint
from testing.parity import compare_logits
from testing.reference_cases import case_dir
from testing.vlm_sessions import Sessions, assert_chain_matches

F32_TOLERANCE = 1e-4
GQA = "com.microsoft::GroupQueryAttention"


def _case(name, seed=0, pad=PAD):
    """(checkpoint folder, transformers' recorded run on the (seed, pad) batch)."""
    folder = case_dir(cases, name)
    return vlm_reference.load_case(folder, seed, pad)


class Package(Sessions):
    """The saved package's three onnxruntime sessions."""

    def __init__(self, path: str, package):
        super().__init__(path, package.config)
        self.package = package

    def image_features(self, images):
        """One vision run per image (its own size), features concatenated in order."""
        return np.concatenate([self.vision.run(None, {"pixel_values": image[None]})[0]
                               for image in images])

    def generate(self, ref, steps=STEPS, tokens=None):
        """(image_features, prefill inputs_embeds, per-step logits, tokens) of a recorded
        batch: the decode steps on the greedy tokens, or on ``tokens`` where given."""
        images = [ref[f"image.{i}"] for i in range(sum(k.startswith("image.") for k in
                                                       ref.arrays))]
        features = self.image_features(images)
        embeds = self.embed(ref["input_ids"], features)
        return (features, embeds, *self.greedy(ref["input_ids"], embeds, ref["attention_mask"],
                                               steps, tokens=tokens))

    def replay(self, ref):
        """generate with the decode steps on transformers' recorded greedy tokens."""
        return self.generate(ref, len(ref.tokens), ref.tokens)


def build_and_load(folder, out_dir, ep="default") -> Package:
    package = build(folder, execution_provider=ep, dtype="f32")
    return Package(package.save(str(out_dir), overwrite=True), package)


@pytest.mark.parametrize("name", sorted(cases.OVERRIDES))
def test_f32_parity(name, tmp_path):
    folder, ref = _case(name)
    pkg = build_and_load(folder, tmp_path / "pkg")
    features, embeds, steps, _ = pkg.replay(ref)

    assert_chain_matches(pkg, ref["input_ids"], ref["attention_mask"],
                         (features, embeds, steps), (ref["features"], ref["merged"], ref.logits),
                         F32_TOLERANCE, name)
    assert float(np.abs(ref["features"]).mean()) > 0.1  # O(1) features: the image steers the text


def test_cpu_build_matches_default_build_and_fuses_gqa_in_the_decoder_only(tmp_path):
    """cpu: GroupQueryAttention in the decoder only; same features, tokens and logits as
    the default build and as transformers (decode steps on an unpadded batch, the
    prefill alone on a left-padded one, as llava_parity_test: ORT's GQA rotates a
    left-padded row's decode steps itself)."""
    folder, _ = _case("default")
    default = build_and_load(folder, tmp_path / "default", "default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    gqa = {key: sum(1 for n in model.graph if f"{n.domain}::{n.op_type}" == GQA)
           for key, model in cpu.package.models.items()}
    assert gqa == {"vision": 0, "embedding": 0, "model": cpu.config.num_hidden_layers}
    for seed, pad, steps in CPU_RUNS:
        _, ref = _case("default", seed, pad)
        ref_features, ref_embeds, ref_logits, tokens = default.generate(ref, steps)
        features, embeds, logits, cpu_tokens = cpu.generate(ref, steps)
        assert float(np.abs(features - ref_features).max()) <= F32_TOLERANCE
        assert float(np.abs(embeds - ref_embeds).max()) <= F32_TOLERANCE
        assert [t.tolist() for t in cpu_tokens] == [t.tolist() for t in tokens]
        diff = compare_logits(logits, ref_logits, ref["attention_mask"])
        assert diff <= F32_TOLERANCE, f"pad {pad}: {diff:.3g}"
        _, _, logits, _ = cpu.replay(ref)  # and vs transformers, on its greedy tokens
        diff = compare_logits(logits, ref.logits, ref["attention_mask"])
        assert diff <= F32_TOLERANCE, f"pad {pad}, cpu vs transformers: {diff:.3g}"


def _in_memory_layout(name: str) -> str:  # transformers 5's module names
    for old, new in (("language_model.model.", "model.language_model."),
                     ("language_model.lm_head.", "lm_head."),
                     ("vision_tower.", "model.vision_tower."),
                     ("multi_modal_projector.", "model.multi_modal_projector.")):
        if name.startswith(old):
            return new + name[len(old):]
    return name


def test_transformers_5_module_names_load_the_same_weights(tmp_path):
    folder, inputs = _case("default")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), _in_memory_layout)
    reference = build_and_load(folder, tmp_path / "a").generate(inputs, steps=1)
    other = build_and_load(renamed, tmp_path / "b").generate(inputs, steps=1)
    for a, b in zip(reference[:3], other[:3]):
        for x, y in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            np.testing.assert_array_equal(x, y)


def test_hub_config_without_tie_key_reads_the_checkpoint_head(tmp_path):
    """Hub checkpoints saved by transformers 4.x name no tie_word_embeddings (Mistral3Config's
    default: true) but hold their own lm_head: transformers 5 then keeps that head, and so
    does the package."""
    hub, ref = _case("hub_no_tie_key")
    with open(os.path.join(hub, "config.json")) as f:
        config = json.load(f)
    assert "tie_word_embeddings" not in config
    assert "tie_word_embeddings" not in config["text_config"]
    assert ref["tie_word_embeddings"]  # transformers' reading of the config
    _, _, steps, _ = build_and_load(hub, tmp_path / "pkg").replay(ref)
    diff = compare_logits(steps, ref.logits, ref["attention_mask"])
    assert diff <= F32_TOLERANCE, f"logits {diff:.3g}"


def test_odd_patch_grids_drop_the_trailing_row_and_column_as_transformers(tmp_path):
    """A 20 x 36 px image is 5 x 9 patches: the 2 x 2 merger (transformers' unfold) drops
    the last patch row and column; the vision model does the same."""
    folder, _ = _case("default")
    pkg = build_and_load(folder, tmp_path / "pkg")
    with np.load(os.path.join(case_dir(cases, "default"), "odd_grid.npz")) as odd:
        image, hf_features = odd["image"], odd["features"]
    with open(os.path.join(folder, "config.json")) as f:
        hidden = json.load(f)["text_config"]["hidden_size"]
    features = pkg.image_features([image])
    assert features.shape == hf_features.shape == (2 * 4, hidden)
    assert float(np.abs(features - hf_features).max()) <= F32_TOLERANCE
