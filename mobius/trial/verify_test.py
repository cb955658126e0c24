"""``mobius verify`` runs transformers itself (the feature: torch is imported at run time
here): it passes a correct f32 package, fails one with a perturbed weight naming the
output, prints an int4 package's quality change, and refuses clearly without torch or a
checkpoint. The checkpoints come from trial_cases.py (built at build time)."""

from __future__ import annotations

import json
import os
import shutil
import sys

import onnx_ir as ir
import pytest

import mobius
from mobius.cli import main
from mobius.package.manifest import MANIFEST
from mobius.trial import trial_cases
from testing.reference_cases import case_dir


def _ckpt(case: str) -> str:
    return os.path.join(case_dir(trial_cases, case), "ckpt")


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pkg") / "llama")
    return mobius.build(_ckpt("llama")).save(out)


def _verify(capsys, *args) -> tuple[int, str, str]:
    code = main(["verify", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_correct_package_passes(llama, capsys):
    code, out, _ = _verify(capsys, llama)
    assert code == 0, out
    assert "ok   logits: max |diff|" in out and "(tolerance 0.0001, f32)" in out
    n = trial_cases.NEW_TOKENS * 3
    assert f"greedy tokens: {n} of {n} equal" in out
    assert out.rstrip().endswith("verify: passed")


def test_an_f16_package_passes(tmp_path, capsys):
    path = mobius.build(_ckpt("llama"), dtype="f16").save(str(tmp_path / "f16"))
    code, out, _ = _verify(capsys, path)
    assert code == 0 and "ok   logits: max |diff|" in out and ", f16)" in out, out


def test_an_encoder_package_passes(tmp_path, capsys):
    path = mobius.build(_ckpt("bert-seq-cls")).save(str(tmp_path / "cls"))
    code, out, _ = _verify(capsys, path)
    assert code == 0 and "ok   logits: max |diff|" in out, out


def test_a_perturbed_weight_fails_naming_the_output(llama, tmp_path, capsys):
    broken = str(tmp_path / "broken")
    os.makedirs(broken)
    for name in os.listdir(llama):
        if not name.startswith("model.onnx"):
            shutil.copy(os.path.join(llama, name), broken)
    model = ir.load(os.path.join(llama, "model.onnx"))
    weight = next(v for name, v in model.graph.initializers.items()
                  if "layers.0" in name and v.const_value.dtype == ir.DataType.FLOAT
                  and len(v.const_value.shape) == 2)
    values = weight.const_value.numpy().copy()
    values[0] += 0.05  # one row, a few percent of the weights' scale
    weight.const_value = ir.tensor(values, name=weight.name)
    ir.save(model, os.path.join(broken, "model.onnx"), external_data="model.onnx.data")
    code, out, _ = _verify(capsys, broken, "--against", _ckpt("llama"))
    assert code == 1, out
    assert "FAIL logits: max |diff|" in out
    line = next(s for s in out.splitlines() if "FAIL logits" in s)
    diff, limit = float(line.split("|diff| ")[1].split()[0]), float(line.split("tolerance ")[1]
                                                                   .split(",")[0])
    assert diff > 10 * limit, line  # far out, not a near miss
    assert "verify: failed: logits: max |diff|" in out


def test_an_int4_package_prints_its_quality_change(tmp_path, capsys):
    path = mobius.build(_ckpt("llama"), quant="int4").save(str(tmp_path / "int4"))
    code, out, _ = _verify(capsys, path)
    assert "int4" in out and "int4 weights: see the quality change" in out
    line = next(s for s in out.splitlines() if "quality on the built-in text" in s)
    kl = float(line.split("KL ")[1].split()[0])
    assert 0 < kl <= 2.0, line  # a change, within the limit
    assert code == 0 and line.lstrip().startswith("ok"), out


def test_without_torch_names_the_extra(llama, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    code, _, err = _verify(capsys, llama)
    assert code == 1 and "pip install mobius[verify]" in err and "torch" in err


def test_without_a_recorded_checkpoint_asks_for_against(llama, tmp_path, capsys):
    other = str(tmp_path / "pkg")
    os.makedirs(other)
    for name in os.listdir(llama):
        if name != MANIFEST:
            shutil.copy(os.path.join(llama, name), other)
    with open(os.path.join(llama, MANIFEST)) as f:
        manifest = json.load(f)
    manifest["build"]["source"] = None
    with open(os.path.join(other, MANIFEST), "w") as f:
        json.dump(manifest, f)
    code, _, err = _verify(capsys, other)
    assert code == 1 and "records no source checkpoint; pass --against" in err
    code, _, err = _verify(capsys, other, "--against", str(tmp_path))
    assert code == 1 and "is not a checkpoint folder" in err


