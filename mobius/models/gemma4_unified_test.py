"""L3: the Gemma 4 Unified vision-language package vs transformers'
Gemma4UnifiedForConditionalGeneration, f32.

Per case (gemma4_unified_cases.py: every parameter and layer_scalar random) one batch of
two prompts, each with one image's merged patches (the smaller padded with (-1, -1)), row
1 left-padded by 3. The package runs as onnxruntime-genai chains it: vision -> embedding
-> decoder (inputs_embeds + input_ids), then each recorded greedy token through the
embedding model (no features) with present.* fed back as past_key_values.*. Compared,
each within 1e-4: image features, merged embeddings, prefill and decode-step logits.
Each switch case, reverted in config.json on the same weights, moves the outputs (or
needs tensors the checkpoint lacks). Values transformers cannot run are refused up front.

L4 (case "genai"): onnxruntime-genai 0.18 runs the cpu package as its gemma4_unified type
on transformers' merged patches and greedy-generates transformers' tokens (genai's own
image processor for the type is not exercised).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnxruntime_genai as og
import pytest

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.models import gemma4_unified_cases as cases
from mobius.tiny.presets import TINY_PRESETS
from testing.gemma4_vl_chain import Chain, built_chain, diffs, edited, load_case
from testing.reference_cases import case_dir
from testing.switch_checks import assert_rejected_up_front

TOLERANCE = 1e-4


@pytest.mark.parametrize("name", sorted(cases.OVERRIDES))
def test_f32_parity_with_transformers(name, tmp_path):
    folder, ref = load_case(cases, name)
    ours = built_chain(folder, tmp_path / "pkg").run(ref)
    assert ours[0].shape == ref["features"].shape, (ours[0].shape, ref["features"].shape)
    found = diffs(ours, ref)
    assert max(found.values()) <= TOLERANCE, f"{name}: {found}"
    assert float(np.abs(ref["features"]).mean()) > 0.1  # O(1) features: the image matters


def test_cpu_build_fuses_the_decoder_and_matches_the_prefill(tmp_path):
    """cpu: GroupQueryAttention in the decoder; prefill logits of the left-padded batch."""
    folder, ref = load_case(cases, "causal")
    package = build(folder, execution_provider="cpu", dtype="f32")
    ops = {n.op_type for n in package.models["model"].graph}
    assert "GroupQueryAttention" in ops, sorted(ops)
    chain = Chain(package.save(str(tmp_path / "pkg"), overwrite=True))
    features = chain.features(ref["pixel_values"], ref["image_position_ids"])
    logits, _ = chain.decode(ref["input_ids"], chain.embed(ref["input_ids"], features),
                             ref["attention_mask"], {})
    real = ref["attention_mask"].astype(bool)
    assert np.abs(logits - ref.logits[0])[real].max() <= TOLERANCE


#: (case, config.json edit that reverts one of its switches)
REVERTS = {
    "bidirectional": ("default", {"text_config": {"use_bidirectional_attention": None}}),
    "softcap": ("default", {"text_config": {"final_logit_softcapping": None}}),
    "k_eq_v": ("default", {"text_config": {"attention_k_eq_v": False}}),
    "kv_sharing": ("default", {"text_config": {"num_kv_shared_layers": 0}}),
    "double_wide": ("default", {"text_config": {"use_double_wide_mlp": False}}),
    "causal": ("causal", {"text_config": {"use_bidirectional_attention": "vision"}}),
    "pool3": ("pool3", {"vision_config": {"pooling_kernel_size": 2}}),
    "plain_softcap": ("plain", {"text_config": {"final_logit_softcapping": 10.0}}),
}


@pytest.mark.parametrize("name", sorted(REVERTS))
def test_reverting_the_switch_changes_the_outputs(name, tmp_path):
    case, edit = REVERTS[name]
    folder, ref = load_case(cases, case)
    reverted = edited(folder, tmp_path / "ckpt", edit)
    try:
        ours = built_chain(reverted, tmp_path / "pkg").run(ref)
    except MobiusError as error:  # the reverted model needs other tensors
        assert "tensor" in str(error), error
        return
    assert max(diffs(ours, ref).values()) > 1e-2, name


def test_bidirectional_attention_is_the_default(tmp_path):
    """A text_config without the key builds the bidirectional decoder ("default")."""
    folder, ref = load_case(cases, "default")
    path = os.path.join(tmp_path, "ckpt")
    shutil.copytree(folder, path)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    del config["text_config"]["use_bidirectional_attention"]
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    assert max(diffs(built_chain(path, tmp_path / "pkg").run(ref), ref).values()) <= TOLERANCE


REJECTED = {
    "output_proj_dims": ({"vision_config": {"output_proj_dims": 24}}, "output_proj_dims"),
    "no_vision_config": ({"vision_config": None}, "vision_config"),
    "bidirectional_all": ({"text_config": {"use_bidirectional_attention": "all"}},
                          "use_bidirectional_attention"),
    "bidirectional_text": ({"text_config": {"use_bidirectional_attention": "text"}},
                           "use_bidirectional_attention"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_unsupported_values_are_rejected_up_front(name, tmp_path):
    edit, words = REJECTED[name]
    config = dict(TINY_PRESETS[cases.PRESET])
    for section, values in edit.items():
        config[section] = None if values is None else {**config[section], **values}
    if config["vision_config"] is None:
        del config["vision_config"]
    assert_rejected_up_front(tmp_path, config, words)


def test_genai_greedy_tokens_equal_transformers(tmp_path):
    folder = case_dir(cases, "genai")
    package = build(os.path.join(folder, "ckpt"), execution_provider="cpu", dtype="f32")
    model = og.Model(package.save(str(tmp_path / "pkg")))
    ref = dict(np.load(os.path.join(folder, "genai.npz")))
    inputs = og.NamedTensors()
    inputs["input_ids"] = ref["input_ids"].astype(np.int32)
    inputs["pixel_values"] = ref["pixel_values"]
    inputs["pixel_position_ids"] = ref["image_position_ids"]
    inputs["num_image_tokens"] = np.array([int(ref["count"])], np.int64)
    expected = [int(t) for t in ref["tokens"][0]]
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=64, do_sample=False)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    tokens = []
    while not generator.is_done() and len(tokens) < len(expected):
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    assert tokens == expected
    assert len(set(expected)) > 1, "degenerate continuation: the comparison would prove little"
