"""L3: the three-model LFM2-VL package vs transformers' Lfm2VlForConditionalGeneration, f32.

A batch of 2 prompts (row 1 left-padded by 3), each with one image of its own size
(4 x 6 and 2 x 4 patches, padded to one patch count as the processor pads them), runs
through the package as onnxruntime-genai chains it -- vision -> embedding -> decoder,
then 3 decode steps feeding transformers' greedy token through the embedding model
(zero image features) and every present.* back as past_key_values.* (the conv layers'
states and the attention layer's KV cache) -- and through transformers with its cache
(recorded at build time: lfm2_vl_parity_cases.py). Compared,
each to 1e-4: image_features vs ``get_image_features`` (resized positions, padding
mask, pixel unshuffle, projector), the merged embeddings and the logits of the prefill
(real positions) and every decode step. Each config switch has a case that changes
the output.
"""

from __future__ import annotations


import numpy as np
import pytest

from mobius.builder import build
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import lfm2_vl_parity_cases as cases
from mobius.models.lfm2_vl_parity_cases import CPU_RUNS, PAD, STEPS, VISION_KEYS
from mobius.tiny.presets import TINY_PRESETS
from testing import vlm_reference
from testing.hf_checkpoints import renamed_checkpoint
from testing.reference_cases import case_dir
from testing.vlm_sessions import StatefulSessions, assert_chain_matches

F32_TOLERANCE = 1e-4


def _case(name, seed=0, pad=PAD):
    """(checkpoint folder, transformers' recorded run on the (seed, pad) batch)."""
    folder = case_dir(cases, name)
    return vlm_reference.load_case(folder, seed, pad)


class Package(StatefulSessions):
    """The saved package's three onnxruntime sessions; the decoder's state is its conv
    states beside the KV caches."""

    def __init__(self, path: str, package):
        super().__init__(path, package.config)
        self.package = package

    def image_features(self, inputs):
        return self.vision.run(None, {n: inputs[n] for n in VISION_KEYS})[0]

    def generate(self, inputs, steps=STEPS, tokens=None):
        """(image_features, prefill inputs_embeds, per-step logits, tokens): the decode
        steps on the greedy tokens, or on ``tokens`` where given."""
        features = self.image_features(inputs)
        embeds = self.embed(inputs["input_ids"], features)
        return (features, embeds, *self.greedy(inputs["input_ids"], embeds,
                                               inputs["attention_mask"], steps,
                                               inputs["position_ids"], tokens))


def build_and_load(folder, out_dir, ep="default") -> Package:
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    return Package(package.save(str(out_dir), overwrite=True), package)


def _check(pkg, ref, name):
    """The package on transformers' recorded batch and greedy tokens vs its outputs."""
    features, embeds, steps, _ = pkg.generate(ref, len(ref.tokens), ref.tokens)
    assert_chain_matches(pkg, ref["input_ids"], ref["attention_mask"],
                         (features, embeds, steps), (ref["features"], ref["merged"], ref.logits),
                         F32_TOLERANCE, name, exact_merge=False)
    return features, steps


@pytest.mark.parametrize("name", cases.CASES)
def test_f32_parity(name, tmp_path):
    folder, ref = _case(name)
    features, steps = _check(build_and_load(folder, tmp_path / "pkg"), ref, name)
    if name != "default":  # the switch changes the output
        _, default = _case("default")
        default_features, default_steps = default["features"], default.logits
        same_shape = features.shape == default_features.shape  # else other token counts
        moved = max(float(np.abs(steps[0] - default_steps[0]).max()),
                    float(np.abs(features - default_features).max())) if same_shape else np.inf
        assert moved > 10 * F32_TOLERANCE, f"{name}: the switch moved the output {moved:.3g}"


def test_cpu_ep_matches_transformers(tmp_path):
    """cpu: the fused graphs (GroupQueryAttention with RoPE inside), same parity: the
    left-padded batch over the prefill, an unpadded one over every step (ORT's GQA kernel
    rotates a left-padded row's decode steps by cache slot, as for text-only LFM2:
    mobius/models/lfm2_families_test.py)."""
    folder, _ = _case("default")
    cpu = build_and_load(folder, tmp_path / "cpu", "cpu")
    gqa = sum(n.op_type == "GroupQueryAttention" for n in cpu.package.models["model"].graph)
    assert gqa == 1  # the one attention layer
    for seed, pad, _ in CPU_RUNS:
        _check(cpu, _case("default", seed, pad)[1], f"cpu pad {pad}")


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


def test_older_checkpoint_names_load_the_same_weights(tmp_path):
    folder, inputs = _case("untied")
    renamed = renamed_checkpoint(folder, str(tmp_path / "renamed"), _older_layout,
                                 "model.vision_tower.")  # what 5.x saves
    reference = build_and_load(folder, tmp_path / "a").generate(inputs, steps=1)
    other = build_and_load(renamed, tmp_path / "b").generate(inputs, steps=1)
    np.testing.assert_array_equal(reference[0], other[0])
    for a, b in zip(reference[2], other[2]):
        np.testing.assert_array_equal(a, b)
