"""L3: Phi-4-multimodal in the hub's original layout (model_type "phi4mm",
mobius/models/phi4mm_hub.py), f32.

The hub checkpoints are the parity cases' transformers checkpoints written back in the
hub layout (testing/phi4mm_hub_checkpoints.py: renamed tensors and config keys, the
decoder projections as LoRA layers with a vision and a speech adapter). With the
"vision_lora" case's PEFT adapter as the vision adapter, the hub package matches
transformers with peft's merge (1e-4, as phi4_multimodal_parity_test). For images, audio
(every speech switch off its default), both at once, LongRoPE, the last tower layer and
tied embeddings, the hub package with a random vision adapter gives the image / audio
features, merged embeddings and logits of the transformers-layout package built with that
adapter merged by ``build(adapter=...)`` (1e-5). The adapter's lora_alpha matters;
configurations and tensors the hub layout cannot be built from fail clearly.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from mobius.builder import build
from mobius.errors import ConfigError, MobiusError
from mobius.models import phi4_multimodal_parity_cases as cases
from mobius.models.phi4_multimodal import FAMILY, Phi4MultimodalForCausalLM
from mobius.models.phi4_multimodal_parity_cases import STEPS
from testing import vlm_reference
from testing.parity import compare_logits
from testing.phi4mm_hub_checkpoints import hub_config, to_hub
from testing.phi4mm_sessions import Phi4MMSessions
from testing.reference_cases import case_dir

F32_TOLERANCE, SAME_TOLERANCE = 1e-4, 1e-5


def _case(name):
    folder = case_dir(cases, name)
    return (os.path.join(folder, "ckpt"),
            vlm_reference.load(os.path.join(folder, "reference.npz")))


def _run(folder, out, ref, adapter=None):
    package = build(folder, execution_provider="default", dtype="f32", prefill_logits="all",
                    adapter=adapter)
    return Phi4MMSessions(package.save(str(out)), package.config).generate(ref, STEPS)


def _edit_config(folder, edit):
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        config = json.load(f)
    edit(config)
    with open(path, "w") as f:
        json.dump(config, f)


def test_hub_vision_lora_matches_transformers(tmp_path):
    """The released layout, its vision adapter = peft's random LoRA: transformers' logits."""
    ckpt, ref = _case("vision_lora")
    hub = to_hub(ckpt, str(tmp_path / "hub"), adapter=os.path.join(
        case_dir(cases, "vision_lora"), "adapter"))
    _, embeds, steps = _run(hub, tmp_path / "pkg", ref)
    embeds_diff = float(np.abs(embeds - ref["merged"]).max() / np.abs(ref["merged"]).max())
    assert embeds_diff <= F32_TOLERANCE, f"embeddings (relative) {embeds_diff:.3g}"
    diff = compare_logits(steps, ref.logits, ref["attention_mask"])
    assert diff <= F32_TOLERANCE, f"logits {diff:.3g}"
    # vision_lora's lora_alpha scales the merged adapter
    _edit_config(hub, lambda c: c["vision_lora"].update(lora_alpha=3 * c["vision_lora"]["r"]))
    _, _, scaled = _run(hub, tmp_path / "scaled", ref)
    assert compare_logits(scaled[:1], ref.logits[:1], ref["attention_mask"]) > 1e-2


HUB_CASES = ["image_and_speech", "speech_variants", "longrope_long_prompt",
             "feature_layer_last", "full_rotary_tied"]


@pytest.mark.parametrize("name", HUB_CASES)
def test_hub_matches_transformers_layout(name, tmp_path):
    ckpt, ref = _case(name)
    hub = to_hub(ckpt, str(tmp_path / "hub"), seed=3)
    hub_run = _run(hub, tmp_path / "hub_pkg", ref)
    tf_run = _run(ckpt, tmp_path / "tf_pkg", ref, adapter=str(tmp_path / "hub-peft"))
    for what, got, want in zip(("image features", "embeddings"), hub_run[:2], tf_run[:2]):
        assert got.shape == want.shape, what
        scale = max(float(np.abs(want).max(initial=0.0)), 1.0)
        assert float(np.abs(got - want).max(initial=0.0)) / scale <= SAME_TOLERANCE, what
    diff = compare_logits(hub_run[2], tf_run[2], ref["attention_mask"])
    assert diff <= SAME_TOLERANCE, f"{name}: logits {diff:.3g}"


def _hub_raw():
    with open(os.path.join(_case("default")[0], "config.json")) as f:
        return hub_config(json.load(f), {"r": 4, "lora_alpha": 8})


def _set(path, value):
    def edit(raw):
        *parents, key = path.split(".")
        for parent in parents:
            raw = raw[parent]
        raw[key] = value
    return edit


@pytest.mark.parametrize("path,value,match", [
    ("embd_layer.image_embd_layer.image_token_compression_cls", None,
     "image_token_compression_cls"),
    ("embd_layer.image_embd_layer.use_hd_transform", False, "use_hd_transform"),
    ("embd_layer.audio_embd_layer.compression_rate", 4, "compression_rate 4"),
    ("embd_layer.embedding_cls", "image", "image_audio"),
    ("img_processor.type_feature", "cls_patch", "type_feature"),
    ("img_processor.layer_idx", "-2", "layer_idx"),
    ("audio_processor.name", "conformer", "cascades"),
    ("audio_processor.config.causal", False, "causal"),
    ("audio_processor.config.relative_attention_bias_args", {"type": "alibi"},
     "relative_attention_bias_args"),
    ("audio_processor.config.nemo_conv_settings", {"conv_channels": 32, "is_causal": True},
     "nemo_conv_settings"),
    ("vision_lora", {"r": 0, "lora_alpha": 8}, "vision_lora"),
    ("quantization_config", {"quant_method": "gptq"}, "quantization_config"),
])
def test_unbuildable_hub_configs_fail_clearly(path, value, match):
    raw = _hub_raw()
    _set(path, value)(raw)
    with pytest.raises(ConfigError, match=match):
        FAMILY.make_config(raw)


def test_hub_config_reads_the_released_defaults():
    """What the released code fixes: image / audio token ids and the SigLIP tower."""
    import onnx_ir as ir

    from mobius.context import build_context

    raw = _hub_raw()
    del raw["img_processor"]["vision_config"]
    del raw["audio_processor"]["config"]["audio_token_id"]
    raw["vocab_size"] = 200064
    config = FAMILY.make_config(raw)
    with build_context(None, ir.DataType.FLOAT):
        module = Phi4MultimodalForCausalLM(config)
    assert (module.image_token_id, module.audio_token_id) == (200010, 200011)
    assert (module.vision.hidden_size, module.vision.num_hidden_layers) == (1152, 27)


@pytest.fixture(scope="module")
def hub_folder(tmp_path_factory):
    return to_hub(_case("default")[0], str(tmp_path_factory.mktemp("hub") / "ckpt"))


def _broken_copy(hub_folder, tmp_path, tensors=None, config=None):
    out = tmp_path / "broken"
    out.mkdir()
    weights = load_file(os.path.join(hub_folder, "model.safetensors"))
    save_file((tensors or (lambda t: t))(dict(weights)), str(out / "model.safetensors"))
    with open(os.path.join(hub_folder, "config.json")) as f:
        raw = json.load(f)
    (config or (lambda c: None))(raw)
    with open(out / "config.json", "w") as f:
        json.dump(raw, f)
    return str(out)


def _without(suffix):
    return lambda t: {k: v for k, v in t.items() if not k.endswith(suffix)}


def _with_default_adapter(t):
    name = "model.layers.0.self_attn.o_proj.lora_A.vision.weight"
    return {**t, name.replace(".vision.", ".default."): t[name].copy()}


@pytest.mark.parametrize("tensors,config,match", [
    (_without("0.self_attn.o_proj.lora_B.vision.weight"), None, "without its vision adapter"),
    (None, lambda c: c.pop("vision_lora"), "no vision_lora"),
    (_with_default_adapter, None, "does not read"),
    (_without("0.mlp.down_proj.base_layer.weight"), None, "missing tensor"),
])
def test_unbuildable_hub_tensors_fail_clearly(hub_folder, tmp_path, tensors, config, match):
    folder = _broken_copy(hub_folder, tmp_path, tensors, config)
    with pytest.raises(MobiusError, match=match):
        build(folder, execution_provider="default", dtype="f32")
