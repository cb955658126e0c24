"""L3 parity of FP8 checkpoints: packages against transformers.

Checkpoints come from testing/fp8_checkpoints.py (tiny transformers models,
every parameter random, quantized there with numpy). Where transformers' CPU
loader reads the FP8 folder (it dequantizes FP8 when no GPU kernel is
available) it is the reference; for blocks that do not divide the weight,
transformers' dequantizer derives the block from the scale grid and refuses
or misreads the shape, so the reference is transformers on the exact float
weights the helper wrote.
"""

from __future__ import annotations

import json
import os
import shutil

import ml_dtypes
import pytest

from mobius.cli import main
from testing.fp8_checkpoints import check_f32_parity, check_same_package, fp8_config, write_fp8
from testing.hf_checkpoints import load_hf_model

CASES = {
    # name: (writer kwargs, transformers reads the FP8 folder)
    "block32": (dict(quantization_config=fp8_config((32, 32)), intermediate_size=160), True),
    "per-tensor-bf16-scales": (dict(quantization_config=fp8_config(None),
                                    scale_dtype=ml_dtypes.bfloat16), True),
    "ragged-16x24": (dict(quantization_config=fp8_config((16, 24))), False),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8")
    made = {}

    def get(name):
        if name not in made:
            made[name] = write_fp8(str(root / name), str(root / f"{name}-ref"), **CASES[name][0])
        return made[name]

    return get


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_package_matches_transformers(checkpoints, name):
    import torch
    import transformers

    folder = checkpoints(name)
    reference = (transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
                 if CASES[name][1] else load_hf_model(folder + "-ref"))
    check_f32_parity(folder, reference.eval())


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
