"""L3 parity of FP8 checkpoints: packages against transformers.

Checkpoints come from testing/fp8_checkpoints.py (tiny transformers models,
every parameter random, quantized there with numpy), written at build time with
transformers' reference run on them (fp8_parity_cases.py, which says which
transformers model is the reference of each).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from mobius.cli import main
from mobius.weights import fp8_parity_cases as cases
from testing import decoder_reference
from testing.fp8_checkpoints import check_f32_parity, check_same_package
from testing.reference_cases import case_dir

CASES = cases.FP8


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """name -> a writable copy of its FP8 folder, with the float one beside it (-ref):
    check_f32_parity writes its package next to the folder."""
    root = tmp_path_factory.mktemp("fp8")
    made = {}

    def get(name):
        if name not in made:
            for suffix in ("", "-ref"):
                shutil.copytree(os.path.join(case_dir(cases, name), "fp8" + suffix),
                                str(root / (name + suffix)), copy_function=shutil.copyfile)
            made[name] = str(root / name)
        return made[name]

    return get


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_package_matches_transformers(checkpoints, name):
    reference = decoder_reference.load(os.path.join(case_dir(cases, name), "reference.npz"))
    check_f32_parity(checkpoints(name), reference)


@pytest.mark.parametrize("name, options", [
    ("ragged-16x24", dict(quant="int4", execution_provider="cpu")),
    ("block32", dict(dtype="f16", execution_provider="cpu")),
])
def test_package_equals_the_float_checkpoints(checkpoints, tmp_path, name, options):
    """Requantized (--quant) or cast (--dtype), an FP8 checkpoint gives the same package
    as the exact float checkpoint it encodes."""
    folder = checkpoints(name)
    ops = check_same_package(folder, folder + "-ref", str(tmp_path), **options)
    assert ("MatMulNBits" in ops) == ("quant" in options)


def test_fp8_without_quantization_config_is_one_line_and_writes_nothing(checkpoints, tmp_path,
                                                                        capsys):
    folder = str(tmp_path / "in")
    shutil.copytree(checkpoints("block32"), folder)
    capsys.readouterr()  # what writing the checkpoint printed
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    del config["quantization_config"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    code = main(["build", "--model", folder, str(tmp_path / "out"), "--ep", "cpu"])
    err = capsys.readouterr().err.strip("\n").split("\n")
    assert code != 0
    assert err == ["mobius: error: model.safetensors: tensor model.layers.0.mlp.down_proj.weight "
                   "has dtype F8_E4M3 (FP8) and config.json has no quantization_config; FP8 "
                   "weights need their block scales (quant_method fp8)"], err
    assert os.listdir(tmp_path) == ["in"]
