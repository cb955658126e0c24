"""--adapter: a PEFT LoRA adapter merged into the weights matches transformers + peft."""

import json
import os

import pytest

from mobius.builder import build
from mobius.errors import WeightsError
from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint
from testing.model_runs import BuiltPackage, f32_parity

TARGETS = ["q_proj", "v_proj", "down_proj"]


def _adapter(base_folder: str, folder: str, seed: int, **lora) -> str:
    """A random (not zero-initialised) LoRA adapter saved by peft itself."""
    import peft
    import torch

    torch.manual_seed(seed)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS,
                             init_lora_weights=False, **lora)
    peft.get_peft_model(load_hf_model(base_folder), config).save_pretrained(folder)
    return folder


def _parity(tmp_path, checkpoint: str, hf_model, adapter=None, name="pkg") -> float:
    # default EP: exact on a left-padded batch; every position's logits are compared
    package = build(checkpoint, adapter=adapter, prefill_logits="all")
    path = package.save(str(tmp_path / name))
    return f32_parity(BuiltPackage(path, package.config, "f32"), hf_model).max_abs_diff


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_hf_checkpoint(str(tmp_path_factory.mktemp("base")), "tiny-llama")


@pytest.mark.parametrize("lora", [{}, {"use_rslora": True}], ids=["lora", "rslora"])
def test_merged_adapter_matches_peft(tmp_path, base, lora):
    import peft

    adapter = _adapter(base, str(tmp_path / "adapter"), seed=1, **lora)
    with_adapter = peft.PeftModel.from_pretrained(load_hf_model(base), adapter).eval()
    assert _parity(tmp_path, base, with_adapter, adapter) <= 1e-4  # adapter on, unmerged peft
    merged = with_adapter.merge_and_unload()
    assert _parity(tmp_path, base, merged, adapter, "pkg2") <= 1e-4  # peft's own merge
    # adapter off: the base package is the base model, and the adapter changes the logits
    assert _parity(tmp_path, base, load_hf_model(base), None, "base") <= 1e-4
    assert _parity(tmp_path, base, load_hf_model(base), adapter, "pkg3") > 1e-2


def _edit_config(folder: str, **changes) -> None:
    path = os.path.join(folder, "adapter_config.json")
    with open(path) as f:
        config = json.load(f)
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f)


@pytest.mark.parametrize("changes,message", [
    ({"use_dora": True}, "use_dora=True is not supported"),
    ({"peft_type": "IA3"}, "is not LORA"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
    ({"r": 0}, "must be positive"),
])
def test_unsupported_adapters_are_refused(tmp_path, base, changes, message):
    adapter = _adapter(base, str(tmp_path / "adapter"), seed=2)
    _edit_config(adapter, **changes)
    with pytest.raises(WeightsError, match=message):
        build(base, adapter=adapter)


def test_adapter_for_another_model_is_refused(tmp_path, base):
    other = make_hf_checkpoint(str(tmp_path / "other"), "tiny-llama", num_hidden_layers=3)
    adapter = _adapter(other, str(tmp_path / "adapter"), seed=3)
    with pytest.raises(WeightsError, match="adapter targets .model.layers.2.*which the base checkpoint lacks"):
        build(base, adapter=adapter)
    with pytest.raises(WeightsError, match="no adapter_config.json"):
        build(base, adapter=str(tmp_path))
