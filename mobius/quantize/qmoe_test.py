"""QMoE (BP-19): a fused MoE on an EP with the QMoE kernel (cuda) gets quantized experts.

The cuda f32 graph runs on onnxruntime's CPU EP (which has MoE and QMoE
kernels): with expert weights exactly on the int4 grid, the QMoE build equals
the float build (renormalized routing or not), and QMoE's inlined function body
equals its kernel. MoEs the QMoE kernel cannot express stay float MoE.
"""

import logging
import os
import shutil

import numpy as np
import pytest
from onnx_ir.passes.common import InlinePass
from safetensors.numpy import load_file, save_file

import mobius
from mobius.quantize import qmoe_cases as cases
from testing import ep_parity, parity
from testing.reference_cases import case_dir
from testing.quant_grid import on_grid

EP = "cuda"


def _copy(case: str, folder: str) -> str:
    """The case's transformers checkpoint (read-only) copied to ``folder``, to edit."""
    shutil.copytree(os.path.join(case_dir(cases, case), "ckpt"), folder,
                    copy_function=shutil.copyfile)
    return folder


def _checkpoint(folder, normalize: bool) -> str:
    _copy("qwen3_moe_normalized" if normalize else "qwen3_moe_unnormalized", folder)
    path = f"{folder}/model.safetensors"
    tensors = load_file(path)
    rng = np.random.default_rng(0)
    for name, array in tensors.items():
        if array.ndim == 2:
            tensors[name] = on_grid(array.shape, 32, True, rng)
    save_file(tensors, path, metadata={"format": "pt"})
    return folder


def _logits(model, config) -> list[np.ndarray]:
    ids, mask = parity.make_batch(config.vocab_size, 6, 0, 0)
    run, _ = ep_parity.run(ep_parity.session(model), config, ids, mask, 1, np.float32)
    return run.logits


def _ops(package) -> dict:
    return {n.op_type: sum(m.op_type == n.op_type for m in package.model.graph)
            for n in package.model.graph if n.op_type in ("MoE", "QMoE")}


@pytest.mark.parametrize("normalize", [True, False])
def test_qmoe_on_grid_matches_float_and_its_body(tmp_path, normalize):
    """Unnormalized routing (norm_topk_prob=False): a renormalizing QMoE times the
    top-k probability mass gives the unnormalized MoE's output."""
    folder = _checkpoint(str(tmp_path / "ckpt"), normalize=normalize)
    reference = mobius.build(folder, execution_provider=EP, dtype="f32")
    built = mobius.build(folder, execution_provider=EP, dtype="f32", quant="int4",
                         quant_accuracy_level=1)
    assert _ops(reference) == {"MoE": 1} and _ops(built) == {"QMoE": 1}
    want = _logits(reference.model, reference.config)
    got = _logits(built.model, built.config)
    InlinePass(criteria=lambda function: function.name == "QMoE")(built.model)
    assert not any(n.op_type == "QMoE" for n in built.model.graph)
    body = _logits(built.model, built.config)
    scale = max(float(np.abs(w).max()) for w in want)
    for w, g, b in zip(want, got, body):
        assert np.abs(g - w).max() <= 1e-5 * scale
        assert np.abs(b - g).max() <= 1e-5 * scale


@pytest.mark.parametrize("normalize,kwargs,reason", [
    (True, {"quant_symmetric": False}, "takes no zero points"),
    (True, {"quant_block_size": 64}, "does not divide"),
])
def test_moe_qmoe_cannot_take_stays_float(tmp_path, caplog, normalize, kwargs, reason):
    folder = _checkpoint(str(tmp_path / "ckpt"), normalize=normalize)
    with caplog.at_level(logging.INFO, logger="mobius.quantize.emit_moe"):
        built = mobius.build(folder, execution_provider=EP, dtype="f32", quant="int4", **kwargs)
    assert _ops(built) == {"MoE": 1}
    assert reason in caplog.text


def _gpt_oss_checkpoint(folder) -> str:
    """tiny-gpt_oss with every quantized weight on the int4 grid: 2-D [out, in] weights (the
    token table [V, H] too: quantized by default) and the stacked experts ([E, in, out] in
    the checkpoint; blocks run along in)."""
    _copy("gpt_oss", folder)
    path = f"{folder}/model.safetensors"
    tensors = load_file(path)
    rng = np.random.default_rng(0)
    for name, array in tensors.items():
        if array.ndim == 2:
            tensors[name] = on_grid(array.shape, 32, True, rng)
        elif array.ndim == 3:  # [E, in, out]
            stacked = np.stack([on_grid(a.T.shape, 32, True, rng).T for a in array])
            tensors[name] = np.ascontiguousarray(stacked)  # save_file writes memory order
        elif array.ndim == 1 or name.endswith("_bias"):  # biases / sinks: random, not 0
            tensors[name] = (0.1 * rng.standard_normal(array.shape)).astype(np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    return folder


def test_gpt_oss_qmoe_keeps_biases_and_clamped_swiglu(tmp_path):
    """QMoE on the CPU kernel with expert biases, activation_alpha/beta and swiglu_limit."""
    folder = _gpt_oss_checkpoint(str(tmp_path / "ckpt"))
    reference = mobius.build(folder, execution_provider=EP, dtype="f32")
    built = mobius.build(folder, execution_provider=EP, dtype="f32", quant="int4",
                         quant_accuracy_level=1)
    assert _ops(reference) == {"MoE": 2} and _ops(built) == {"QMoE": 2}
    qmoe = next(n for n in built.model.graph if n.op_type == "QMoE")
    assert qmoe.inputs[4] is not None and qmoe.inputs[7] is not None  # fc1 / fc2 biases
    assert qmoe.attributes["swiglu_limit"].value == 7.0
    want = _logits(reference.model, reference.config)
    got = _logits(built.model, built.config)
    InlinePass(criteria=lambda function: function.name == "QMoE")(built.model)
    body = _logits(built.model, built.config)
    scale = max(float(np.abs(w).max()) for w in want)
    for w, g, b in zip(want, got, body):
        assert np.abs(g - w).max() <= 1e-5 * scale
        assert np.abs(b - g).max() <= 1e-5 * scale
