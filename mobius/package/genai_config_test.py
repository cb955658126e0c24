"""genai_config.json contents (no onnxruntime-genai needed; genai_e2e_test.py runs them)."""

from __future__ import annotations

import pytest

from mobius.config.architecture import ArchitectureConfig
from mobius.models.registry import family_for
from mobius.package.genai_config import GENAI_DECODER_TYPES, decoder_genai_config, genai_model_type
from mobius.tiny.presets import TINY_PRESETS


def _config(preset="tiny-llama", generation=None, **overrides) -> ArchitectureConfig:
    raw = {**TINY_PRESETS[preset], **overrides}
    return family_for(raw).make_config(raw, generation or {})


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
def test_known_families_keep_their_type(model_type):
    assert genai_model_type(model_type) == model_type


def test_types_genai_does_not_name_use_its_generic_decoder():
    assert genai_model_type("some_new_family") == "decoder"
    assert "decoder" in GENAI_DECODER_TYPES


def test_gpt2_is_not_genai_legacy_gpt_model():
    # genai's "gpt2" type expects stacked past_%d tensors; mobius emits key/value pairs.
    assert genai_model_type("gpt2") == "decoder"


DECODER_PRESETS = sorted(name for name, raw in TINY_PRESETS.items()
                         if family_for(raw).task.name == "text-generation")


@pytest.mark.parametrize("preset", DECODER_PRESETS)
def test_decoder_section_describes_the_graph(preset):
    config = _config(preset)
    genai = decoder_genai_config(config)
    model, decoder = genai["model"], genai["model"]["decoder"]
    assert model["type"] == genai_model_type(config.model_type)
    assert model["vocab_size"] == config.vocab_size
    eos = model["eos_token_id"]  # the preset's 2 first; a family may add its own (LFM2-Audio)
    eos = eos if isinstance(eos, list) else [eos]
    assert (model["bos_token_id"], eos[0], model["pad_token_id"]) == (1, 2, 0)
    assert list(config.eos_token_id) == eos
    assert decoder["head_size"] == config.head_dim  # tiny-qwen3: 32, not hidden / heads
    assert decoder["num_key_value_heads"] == config.num_key_value_heads
    assert decoder["inputs"]["past_key_names"] % 3 == "past_key_values.3.key"
    assert decoder["outputs"]["present_value_names"] % 3 == "present.3.value"
    assert genai["search"]["past_present_share_buffer"] is False
    assert genai["search"]["do_sample"] is False


def test_share_buffer_and_provider_options_are_passed_through():
    genai = decoder_genai_config(_config(), provider_options=[{"cuda": {}}],
                                 past_present_share_buffer=True)
    assert genai["search"]["past_present_share_buffer"] is True
    assert genai["model"]["decoder"]["session_options"]["provider_options"] == [{"cuda": {}}]


def test_several_eos_ids_and_missing_pad():
    config = _config(generation={"eos_token_id": [2, 7]}, pad_token_id=None)
    model = decoder_genai_config(config)["model"]
    assert model["eos_token_id"] == [2, 7]
    assert model["pad_token_id"] == 2
