"""L3: the Phi-4-multimodal package (vision / embedding / decoder) vs transformers'
Phi4MultimodalForCausalLM, f32.

Three images of genai's HD form (testing/phi4mm_checkpoints.py): 1 x 2 crops with the
canvas's last columns padding, 2 x 1 crops with its last rows padding (the crop
positions rescale and the tiling cuts to the valid extent), 1 x 1 zero-padded to 3
crops. Row 0 of the batch holds the first two, row 1 the third, left-padded by 3.
The package runs as onnxruntime-genai chains it (vision -> embedding -> decoder, then
3 decode steps through the embedding model with zero image features and the presents
fed back, on transformers' greedy tokens); transformers' run with its own cache is
recorded at build time (phi4_multimodal_parity_cases.py). Compared to 1e-4: the merged
embeddings (the image features in place; relative to their size) and the logits of
every step (absolute). Speech: audios of 100 and 70 mel frames (row 1 left-padded),
every speech switch off its default, one audio past transformers' 500-position chunk,
and an image + audio prompt (the vision-speech projections, genai's mode 3). A random
PEFT LoRA on the decoder projections (as the released vision-lora) merged by
``build(adapter=...)`` matches transformers with peft's merge and changes the logits.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mobius.builder import build
from mobius.models import phi4_multimodal_parity_cases as cases
from mobius.models.phi4_multimodal_parity_cases import AUDIO_CASES, IMAGE_CASES, STEPS
from testing import vlm_reference
from testing.parity import compare_logits
from testing.phi4mm_sessions import Phi4MMSessions
from testing.reference_cases import case_dir

F32_TOLERANCE = 1e-4


def _case(name):
    """(checkpoint folder, transformers' recorded run) of a cases module case."""
    folder = case_dir(cases, name)
    return (os.path.join(folder, "ckpt"),
            vlm_reference.load(os.path.join(folder, "reference.npz")))


def _package(folder, out, ep="default", adapter=None):
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all",
                    adapter=adapter)
    return Phi4MMSessions(package.save(str(out)), package.config)


def assert_parity(name, embeds, steps, ref):
    # relative: the tower's N(0, 1) attention weights (transformers' init) make image
    # features whose rounding grows with their O(1) size
    hf_merged = ref["merged"]
    embeds_diff = float(np.abs(embeds - hf_merged).max() / np.abs(hf_merged).max())
    assert embeds_diff <= F32_TOLERANCE, f"{name}: embeddings (relative) {embeds_diff:.3g}"
    diff = compare_logits(steps, ref.logits, ref["attention_mask"])
    assert diff <= F32_TOLERANCE, f"{name}: logits {diff:.3g}"


PARAMS = [(name, "default") for name in sorted(IMAGE_CASES)] + [("default", "cpu")]


@pytest.mark.parametrize("name,ep", PARAMS, ids=[f"{n}-{e}" for n, e in PARAMS])
def test_f32_parity(name, ep, tmp_path):
    folder, ref = _case(name)
    features, embeds, steps = _package(folder, tmp_path / "pkg", ep).generate(ref, STEPS)
    assert features.shape[0] == int((ref["input_ids"] == ref["image_token_id"]).sum())
    assert_parity(name, embeds, steps, ref)


AUDIO_PARAMS = [(name, "default") for name in sorted(AUDIO_CASES)] + [("speech", "cpu")]


@pytest.mark.parametrize("name,ep", AUDIO_PARAMS, ids=[f"{n}-{e}" for n, e in AUDIO_PARAMS])
def test_f32_speech_parity(name, ep, tmp_path):
    folder, ref = _case(name)
    _, embeds, steps = _package(folder, tmp_path / "pkg", ep).generate(ref, STEPS)
    assert_parity(name, embeds, steps, ref)


def test_f32_parity_merged_vision_lora(tmp_path):
    """build(adapter=a PEFT LoRA on the decoder) == transformers with peft's merge."""
    folder, ref = _case("vision_lora")
    lora = os.path.join(case_dir(cases, "vision_lora"), "adapter")
    with open(os.path.join(case_dir(cases, "vision_lora"), "lora.json")) as f:
        targeted = json.load(f)["targeted"]
    with open(os.path.join(folder, "config.json")) as f:
        layers = json.load(f)["num_hidden_layers"]
    assert targeted == 4 * layers
    runs = {name: _package(folder, tmp_path / name, adapter=path).generate(ref, STEPS)
            for name, path in (("lora", lora), ("base", None))}
    _, embeds, steps = runs["lora"]
    assert_parity("vision_lora", embeds, steps, ref)
    base_steps = runs["base"][2]
    # the adapter matters
    assert compare_logits(steps[:1], base_steps[:1], ref["attention_mask"]) > 1e-2
