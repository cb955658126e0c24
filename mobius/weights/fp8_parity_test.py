"""L3 parity of FP8 and MXFP4 checkpoints: packages against transformers.

Checkpoints come from testing/fp8_checkpoints.py (tiny transformers models,
every parameter random, quantized there with numpy). Where transformers' CPU
loader reads the quantized folder (it dequantizes FP8 and MXFP4 when no GPU
kernel is available) it is the reference; for FP8 blocks that do not divide
the weight, transformers' dequantizer derives the block from the scale grid
and refuses or misreads the shape, so the reference is transformers on the
exact float weights the helper wrote.
"""

from __future__ import annotations

import json
import os
import shutil

import ml_dtypes
import numpy as np
import onnx
import pytest

from mobius.builder import build
from mobius.cli import main
from testing.fp8_checkpoints import fp8_config, write_fp8, write_mxfp4
from testing.hf_checkpoints import load_hf_model
from testing.model_runs import NUMPY_DTYPES, BuiltPackage, f32_parity, onnx_greedy, ort_session
from testing.parity import make_batch

CASES = {
    # name: (writer kwargs, transformers reads the quantized folder)
    "fp8-block32": (dict(quantization_config=fp8_config((32, 32)), intermediate_size=160), True),
    "fp8-per-tensor-bf16-scales": (dict(quantization_config=fp8_config(None),
                                        scale_dtype=ml_dtypes.bfloat16), True),
    "fp8-ragged-16x24": (dict(quantization_config=fp8_config((16, 24))), False),
    "mxfp4": ({}, True),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("fp8")
    made = {}

    def get(name):
        if name not in made:
            kwargs = CASES[name][0]
            folder, reference = str(root / name), str(root / f"{name}-ref")
            if name == "mxfp4":
                write_mxfp4(folder, reference, **kwargs)
            else:
                write_fp8(folder, reference, **kwargs)
            made[name] = folder
        return made[name]

    return get


def _reference(folder: str, quantized: bool):
    """transformers on the quantized folder (CPU: dequantized when loaded), or on the float one."""
    import torch
    import transformers

    if not quantized:
        return load_hf_model(folder + "-ref")
    extra = {}
    if "mxfp4" in folder:
        extra["quantization_config"] = transformers.Mxfp4Config(dequantize=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **extra)
    return model.eval()


@pytest.mark.parametrize("name", sorted(CASES))
def test_f32_package_matches_transformers(checkpoints, tmp_path, name):
    folder = checkpoints(name)
    package = build(folder, execution_provider="cpu", prefill_logits="all")
    path = package.save(str(tmp_path / "onnx"))
    run = f32_parity(BuiltPackage(path, package.config, "f32"),
                     _reference(folder, CASES[name][1]), pad=0, steps=2)
    scale = max(float(np.abs(step).max()) for step in run.hf_steps)
    assert run.max_abs_diff <= 1e-5 * scale, (run.max_abs_diff, scale)


@pytest.mark.parametrize("name, options", [
    ("fp8-ragged-16x24", dict(quant="int4", execution_provider="cpu")),
    ("fp8-block32", dict(dtype="f16", execution_provider="cpu")),
    ("mxfp4", dict(quant="int4", execution_provider="cpu")),
])
def test_package_equals_the_float_checkpoints(checkpoints, tmp_path, name, options):
    """Requantized (--quant) or cast (--dtype), a quantized checkpoint gives the same
    package as the exact float checkpoint it encodes: the same initializers, the same logits."""
    folder = checkpoints(name)
    packages = [build(source, prefill_logits="all", **options)
                for source in (folder, folder + "-ref")]
    paths = [p.save(str(tmp_path / label)) for p, label in zip(packages, ("quantized", "float"))]
    models = [onnx.load(f"{p}/model.onnx") for p in paths]
    weights = [{t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
               for m in models]
    assert weights[0].keys() == weights[1].keys()
    for key, value in weights[0].items():
        np.testing.assert_array_equal(value, weights[1][key], err_msg=key)
    ops = [n.op_type for n in models[0].graph.node]
    if options.get("quant"):
        assert "MatMulNBits" in ops
    if name == "mxfp4":
        assert "QMoE" in ops
    prompt = make_batch(packages[0].config.vocab_size, pad=0)
    runs = [onnx_greedy(ort_session(f"{p}/model.onnx"), package.config, *prompt, 2,
                        NUMPY_DTYPES[options.get("dtype", "f32")])
            for p, package in zip(paths, packages)]
    for a, b in zip(*(logits for logits, _ in runs)):
        np.testing.assert_array_equal(a, b)


def test_fp8_without_quantization_config_is_one_line_and_writes_nothing(checkpoints, tmp_path,
                                                                        capsys):
    folder = str(tmp_path / "in")
    shutil.copytree(checkpoints("fp8-block32"), folder)
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


def test_mxfp4_experts_are_dequantized_one_expert_at_a_time(checkpoints, tmp_path, monkeypatch):
    """Fusing the experts into one MoE reads each expert of a stack once, never the whole
    stack once per expert (E times the dequantization work, E stacks resident)."""
    from mobius.weights.dequantized_checkpoint import DequantizedCheckpoint

    reads = []
    read, read_rows = DequantizedCheckpoint.read, DequantizedCheckpoint.read_rows
    monkeypatch.setattr(DequantizedCheckpoint, "read", lambda self, name: reads.append(
        (name, None)) or read(self, name))
    monkeypatch.setattr(DequantizedCheckpoint, "read_rows", lambda self, name, start, stop:
                        reads.append((name, (start, stop))) or read_rows(self, name, start, stop))
    build(checkpoints("mxfp4"), execution_provider="cpu").save(str(tmp_path / "onnx"))
    experts = [(n, rows) for n, rows in reads if n.endswith(("gate_up_proj", "down_proj"))]
    assert sorted(experts) == sorted(
        (f"model.layers.{layer}.mlp.experts.{proj}", (e, e + 1))
        for layer in range(2) for proj in ("gate_up_proj", "down_proj") for e in range(5))
