"""--adapter: a PEFT LoRA adapter merged into the weights matches transformers + peft
(recorded at build time with the adapters peft saved, lora_cases.py)."""

import json
import os
import shutil

import pytest

from mobius.builder import build
from mobius.errors import WeightsError
from mobius.weights import lora_cases as cases
from testing import decoder_reference
from testing.model_runs import BuiltPackage, f32_parity
from testing.reference_cases import case_dir


def _recorded(name: str) -> str:
    """A folder of lora_cases ("base", an adapter) or its recorded run ("<name>.npz")."""
    return os.path.join(case_dir(cases, "peft"), name)


def _run(name: str) -> decoder_reference.DecoderReference:
    return decoder_reference.load(_recorded(name + ".npz"))


def _parity(tmp_path, checkpoint: str, reference, adapter=None, name="pkg") -> float:
    # default EP: exact on a left-padded batch; every position's logits are compared
    package = build(checkpoint, adapter=adapter, prefill_logits="all")
    path = package.save(str(tmp_path / name))
    return f32_parity(BuiltPackage(path, package.config, "f32"), reference).max_abs_diff


@pytest.fixture(scope="module")
def base():
    return _recorded("base")


@pytest.mark.parametrize("lora", sorted(cases.LORAS))
def test_merged_adapter_matches_peft(tmp_path, base, lora):
    adapter = _recorded(lora)
    assert _parity(tmp_path, base, _run(lora), adapter) <= 1e-4  # adapter on, unmerged peft
    assert _parity(tmp_path, base, _run(lora + "-merged"), adapter, "pkg2") <= 1e-4  # peft's merge
    # adapter off: the base package is the base model, and the adapter changes the logits
    assert _parity(tmp_path, base, _run("base"), None, "base") <= 1e-4
    assert _parity(tmp_path, base, _run("base"), adapter, "pkg3") > 1e-2


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
    adapter = str(tmp_path / "adapter")  # the recorded adapter of seed 2, to edit
    shutil.copytree(_recorded("refused"), adapter, copy_function=shutil.copyfile)
    _edit_config(adapter, **changes)
    with pytest.raises(WeightsError, match=message):
        build(base, adapter=adapter)


def test_adapter_for_another_model_is_refused(tmp_path, base):
    adapter = _recorded("other")  # for a 3-layer tiny-llama
    with pytest.raises(WeightsError, match="adapter targets .model.layers.2.*which the base checkpoint lacks"):
        build(base, adapter=adapter)
    with pytest.raises(WeightsError, match="no adapter_config.json"):
        build(base, adapter=str(tmp_path))
