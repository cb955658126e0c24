"""L3: the three-model LLaVA package vs transformers' LlavaForConditionalGeneration, f32.

Checkpoints are written by transformers itself from the tiny-llava preset plus
per-case overrides, with random biases and O(1) image features
(testing/llava_checkpoints.py). One batch of 2 prompts, one image
each (row 1 left-padded by 3), is run through the package as onnxruntime-genai
chains it -- vision -> embedding -> decoder, then decode steps that feed
transformers' greedy token through the embedding model (with zero image features)
and the decoder's present.* back as past_key_values.* -- and through transformers
with its own cache (recorded at build time: llava_parity_cases.py). Compared, each to 1e-4:

* vision: image_features vs ``get_image_features(...).pooler_output`` (concatenated);
* embedding: inputs_embeds vs transformers' ``masked_scatter`` merge (fed
  transformers' features, so only the merge is compared: it must be exact);
* decoder: logits over the prefill (real positions) + 3 decode steps vs the full
  transformers forward (pixel_values in), i.e. the whole chain end to end.

Also: the cpu build (GQA, packed QKV, fused norms) agrees with the portable
default build on onnxruntime's CPU EP (like ep/parity_test.py for the cpu EP: decode
steps on an unpadded batch, the prefill only on a left-padded one, because ORT's
GQA kernel rotates a left-padded row's decode steps wrongly when it applies
RoPE itself), GQA appears in the decoder only, and the checkpoint spellings of
other transformers versions load to the same graph.
"""

from __future__ import annotations


import numpy as np
import pytest

from mobius.builder import build
from mobius.models import llava_parity_cases as cases
from mobius.models.llava_parity_cases import CPU_RUNS, PAD, STEPS
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

    def image_features(self, pixel_values):
        return self.vision.run(None, {"pixel_values": pixel_values})[0]

    def generate(self, ref, steps=STEPS, tokens=None):
        """(image_features, prefill inputs_embeds, per-step logits, tokens) of a recorded
        batch: the decode steps on the greedy tokens, or on ``tokens`` where given."""
        features = self.image_features(ref["pixel_values"])
        embeds = self.embed(ref["input_ids"], features)
        return (features, embeds, *self.greedy(ref["input_ids"], embeds, ref["attention_mask"],
                                               steps, tokens=tokens))


def build_and_load(folder, out_dir, ep="default") -> Package:
    package = build(folder, execution_provider=ep, dtype="f32")
    return Package(package.save(str(out_dir), overwrite=True), package)


@pytest.mark.parametrize("name", cases.CASES)
def test_f32_parity(name, tmp_path):
    folder, ref = _case(name)
    pkg = build_and_load(folder, tmp_path / "pkg")
    features, embeds, steps, _ = pkg.generate(ref, len(ref.tokens), ref.tokens)

    assert_chain_matches(pkg, ref["input_ids"], ref["attention_mask"], (features, embeds, steps),
                         (ref["features"], ref["merged"], ref.logits), F32_TOLERANCE, name)


def test_cpu_build_matches_default_build_and_fuses_gqa_in_the_decoder_only(tmp_path):
    folder, _ = _case("default")
    default = build_and_load(folder, tmp_path / "default", "default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    layers = cpu.config.num_hidden_layers
    gqa = {key: sum(1 for n in model.graph if f"{n.domain}::{n.op_type}" == GQA)
           for key, model in cpu.package.models.items()}
    assert gqa == {"vision": 0, "embedding": 0, "model": layers}
    assert all(GQA not in {f"{n.domain}::{n.op_type}" for n in m.graph}
               for m in default.package.models.values())
    assert cpu.package.genai_config["search"]["past_present_share_buffer"] is True

    for seed, pad, steps in CPU_RUNS:
        _, inputs = _case("default", seed, pad)
        ref_features, ref_embeds, ref_logits, tokens = default.generate(inputs, steps)
        features, embeds, logits, cpu_tokens = cpu.generate(inputs, steps)
        assert float(np.abs(features - ref_features).max()) <= F32_TOLERANCE
        assert float(np.abs(embeds - ref_embeds).max()) <= F32_TOLERANCE
        assert [t.tolist() for t in cpu_tokens] == [t.tolist() for t in tokens]
        diff = compare_logits(logits, ref_logits, inputs["attention_mask"])
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
def test_other_checkpoint_spellings_load_the_same_weights(layout, tmp_path):
    folder, inputs = _case("default")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), layout)
    reference = build_and_load(folder, tmp_path / "a")
    other = build_and_load(renamed, tmp_path / "b")
    for a, b in zip(reference.generate(inputs, steps=1)[:3],
                    other.generate(inputs, steps=1)[:3]):
        for x, y in zip(a if isinstance(a, list) else [a], b if isinstance(b, list) else [b]):
            np.testing.assert_array_equal(x, y)
