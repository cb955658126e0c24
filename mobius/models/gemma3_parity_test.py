"""L3: the three-model Gemma 3 package vs transformers' Gemma3ForConditionalGeneration, f32.

Checkpoints are written by transformers from the tiny-gemma3-vl preset plus
per-case overrides, every parameter random and the projection scaled so image
features are O(1) (testing/gemma3_checkpoints.py). One batch of 2 prompts -- row 0
with two images, row 1 with one, left-padded by 3 -- runs through the package as
onnxruntime-genai chains it (vision -> embedding -> decoder, which also reads
input_ids; then 3 decode steps on transformers' greedy tokens through the embedding
model with zero image features and the presents fed back) and through transformers
with its own cache, given token_type_ids in the prefill as its processor makes them
(recorded at build time: gemma3_parity_cases.py). Compared to 1e-4:
image features, merged embeddings (exactly, on transformers' own features) and the
logits of every step. transformers without token_type_ids (causal only) must differ:
the bidirectional image blocks are what the decoder's input_ids are for.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from mobius.builder import build
from mobius.models import gemma3_parity_cases as cases
from mobius.models.gemma3_parity_cases import STEPS
from testing import vlm_reference
from testing.hf_checkpoints import renamed_checkpoint
from testing.parity import compare_logits
from testing.reference_cases import case_dir
from testing.vlm_sessions import Sessions, assert_chain_matches

F32_TOLERANCE = 1e-4


def _case(name):
    """(checkpoint folder, transformers' recorded run)."""
    folder = case_dir(cases, name)
    return (os.path.join(folder, "ckpt"),
            vlm_reference.load(os.path.join(folder, "reference.npz")))


class Package(Sessions):
    """The saved package's three onnxruntime sessions, chained as genai runs them; the
    decoder reads its token ids beside inputs_embeds."""

    def step(self, input_ids, embeds, attention_mask, position_ids, past):
        return self.decode(embeds, attention_mask, position_ids, past, {"input_ids": input_ids})

    def generate(self, ref, tokens=None):
        """(image_features, prefill inputs_embeds, per-step logits, tokens) of the recorded
        batch: the decode steps on the greedy tokens, or on ``tokens`` where given."""
        features = self.vision.run(None, {"pixel_values": ref["pixel_values"]})[0]
        embeds = self.embed(ref["input_ids"], features)
        return (features, embeds, *self.greedy(ref["input_ids"], embeds, ref["attention_mask"],
                                               STEPS, tokens=tokens))


PARAMS = [(name, "default") for name in cases.CASES] + [("pooled_16_tokens", "cpu")]


@pytest.mark.parametrize("name,ep", PARAMS, ids=[f"{n}-{e}" for n, e in PARAMS])
def test_f32_parity(name, ep, tmp_path):
    folder, ref = _case(name)
    package = build(folder, execution_provider=ep, dtype="f32")
    pkg = Package(package.save(str(tmp_path / "pkg")), package.config)
    features, embeds, steps, _ = pkg.generate(ref, ref.tokens)
    mask = ref["attention_mask"]

    assert_chain_matches(pkg, ref["input_ids"], mask, (features, embeds, steps),
                         (ref["features"], ref["merged"], ref.logits), F32_TOLERANCE, name)
    if ep == "default":  # the image blocks' two-way attention is what the decoder adds
        causal = [ref[f"causal.{i}"] for i in range(len(ref.logits))]
        assert compare_logits(steps, causal, mask) > 100 * F32_TOLERANCE
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
def test_other_checkpoint_spellings_load_the_same_weights(layout, tmp_path):
    folder, ref = _case("pooled_16_tokens")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), layout)
    runs = []
    for name, source in (("a", folder), ("b", renamed)):
        package = build(source, execution_provider="default", dtype="f32")
        pkg = Package(package.save(str(tmp_path / name)), package.config)
        runs.append(pkg.generate(ref))
    for a, b in zip(runs[0][2], runs[1][2]):
        np.testing.assert_array_equal(a, b)
