"""L3 for the CTC speech families (Task.reference.runner "ctc": wav2vec2, HuBERT):
ONNX logits vs transformers' AutoModelForCTC on a batch of 2 waveforms, row 1
zero-padded by a quarter, every frame of both rows compared.

The variants cover every switch the module reads: feature-encoder norm (group:
no attention_mask input; layer: the mask is fed and used), stable (pre-norm) vs
post-norm layers, conv biases, HuBERT's optional feature-projection norm and
positional BatchNorm (random running statistics), an even and an odd
positional-conv kernel, both weight-norm spellings. f32 must
match to 1e-4; f16 / bf16 builds run on onnxruntime's CPU EP against the f32
reference (tolerances below).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import mobius
from mobius.errors import ConfigError
from mobius.models import ctc_parity_cases as cases
from testing import ctc_runs
from testing.ctc_runs import ctc_parity, run_onnx
from testing.model_runs import NUMPY_DTYPES, build_package, op_counts, ort_session
from testing.reference_cases import case_dir

F32_TOLERANCE = 1e-4


def _checkpoint(case: str) -> str:
    """The case's checkpoint (ctc_parity_cases.py): read it, never write."""
    return os.path.join(case_dir(cases, case), "ckpt")


def _reference(case: str) -> ctc_runs.CtcReference:
    return ctc_runs.load(os.path.join(case_dir(cases, case), "reference.npz"))


def _session(folder, out, dtype="f32", ep="default"):
    built = build_package(folder, out, dtype, ep)
    return ort_session(built.model_path), built


@pytest.mark.parametrize("case", cases.CASES)
def test_f32_logits(case, tmp_path):
    folder = _checkpoint(case)
    session, _ = _session(folder, tmp_path / "onnx")
    with open(os.path.join(folder, "config.json")) as f:
        layer = json.load(f)["feat_extract_norm"] == "layer"
    inputs = [i.name for i in session.get_inputs()]
    assert inputs == (["input_values", "attention_mask"] if layer else ["input_values"])
    run = ctc_parity(session, _reference(case))
    assert run.onnx.shape == (2, 79, 37)
    print(f"{case} f32: {run.diff:.3g}")
    assert run.diff <= F32_TOLERANCE, f"{case}: {run.diff:.3g}"


def test_attention_mask_matters(tmp_path):
    """Guards the padded cases: the padded row's real frames change when the mask is
    all ones, so a graph that ignored attention_mask would fail test_f32_logits."""
    session, _ = _session(_checkpoint("hubert"), tmp_path / "onnx")
    run = ctc_parity(session, _reference("hubert"))
    unmasked = dict(run.feeds, attention_mask=np.ones_like(run.feeds["attention_mask"]))
    changed = np.abs(run_onnx(session, unmasked, np.float32) - run.reference)[1, :59]
    assert changed.max() > 100 * F32_TOLERANCE, changed.max()


def test_old_weight_norm_spelling(tmp_path):
    """Checkpoints saved before torch's parametrizations name weight_norm's tensors
    weight_g / weight_v: the same weight is computed from them."""
    from safetensors.numpy import load_file, save_file

    folder = str(tmp_path / "old")
    shutil.copytree(_checkpoint("wav2vec2"), folder, copy_function=shutil.copyfile)
    path = os.path.join(folder, "model.safetensors")
    renames = {".parametrizations.weight.original0": ".weight_g",
               ".parametrizations.weight.original1": ".weight_v"}
    tensors = {}
    for name, array in load_file(path).items():
        for new, old in renames.items():
            name = name.replace(new, old)
        tensors[name] = array
    assert sum(n.endswith((".weight_g", ".weight_v")) for n in tensors) == 2
    save_file(tensors, path, metadata={"format": "pt"})
    session, _ = _session(folder, tmp_path / "onnx")
    run = ctc_parity(session, _reference("wav2vec2"))  # transformers read the new spelling
    assert run.diff <= F32_TOLERANCE, run.diff


# f16 / bf16: |onnx_lowp - reference_f32| <= 4 * eps(dtype) * max(1, max|ref|). f16 rounds
# weights and activations, bf16 (computed in float32 on the default EP) weights and outputs.
# Every conv output is normalized (group / layer norm) and each tiny layer re-normalizes,
# so the error does not grow with depth. Measured: 0.64-0.80 eps (f16), 0.41-0.70 eps
# (bf16) with logits of magnitude < 1: >= 5x headroom, while a wrong mask, norm, padding or
# bias is off by O(0.1).
EPS = {"f16": 2.0**-10, "bf16": 2.0**-7}


@pytest.mark.parametrize("dtype", sorted(EPS))
@pytest.mark.parametrize("case", ["wav2vec2", "hubert"])
def test_low_precision_close_to_f32_reference(case, dtype, tmp_path):
    session, _ = _session(_checkpoint(case), tmp_path / f"onnx-{dtype}", dtype)
    run = ctc_parity(session, _reference(case), NUMPY_DTYPES[dtype])
    assert np.isfinite(run.onnx).all()
    atol = 4 * EPS[dtype] * max(1.0, float(np.abs(run.reference).max()))
    print(f"{case} {dtype}: {run.diff:.3g} = {run.diff / EPS[dtype]:.2f} eps")
    assert run.diff <= atol, f"{case} {dtype}: {run.diff:.3g} > {atol:.3g}"


@pytest.mark.parametrize("key,value,message", [
    ("feat_extract_norm", "batch", "'feat_extract_norm' must be"),
    ("add_adapter", True, "'add_adapter' is not supported"),
    ("adapter_attn_dim", 16, "'adapter_attn_dim'"),
    ("conv_stride", [5, 2], "differ in length"),
    ("num_conv_pos_embedding_groups", 3, "not divisible"),
])
def test_unsupported_config_is_a_clear_error(key, value, message, tmp_path):
    folder = str(tmp_path / "ckpt")
    shutil.copytree(_checkpoint("hubert"), folder, copy_function=shutil.copyfile)
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        raw = json.load(f)
    with open(config_path, "w") as f:
        json.dump({**raw, key: value}, f)
    with pytest.raises(ConfigError, match=message):
        mobius.build(folder).save(str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("case,mask", [("hubert", True), ("wav2vec2", False)])
def test_package_carries_the_preprocessor_config(case, mask, tmp_path):
    """The checkpoint's preprocessor_config.json as it is; without one, wav2vec2's
    defaults with an attention mask exactly where the graph takes one."""
    folder = str(tmp_path / "ckpt")
    shutil.copytree(_checkpoint(case), folder, copy_function=shutil.copyfile)
    path = os.path.join(folder, "preprocessor_config.json")
    with open(path) as f:
        own = {**json.load(f), "sampling_rate": 8000, "do_normalize": False}
    with open(path, "w") as f:
        json.dump(own, f)
    def written(out):
        saved = mobius.build(folder).save(str(tmp_path / out))
        with open(os.path.join(saved, "preprocessor_config.json")) as f:
            return json.load(f)

    assert written("own") == own
    os.remove(path)
    default = written("default")
    assert default["sampling_rate"] == 16000 and default["do_normalize"] is True
    assert default["return_attention_mask"] is mask


@pytest.mark.parametrize("case", ["wav2vec2", "hubert"])
def test_cpu_build_f32_logits(case, tmp_path):
    """The cpu EP's MultiHeadAttention keeps f32 parity (HuBERT: with its padding mask)."""
    session, built = _session(_checkpoint(case), tmp_path / "onnx", ep="cpu")
    ops = op_counts(built.model_path)
    assert ops.get("com.microsoft::MultiHeadAttention", 0) > 0 and "Attention" not in ops, ops
    assert ctc_parity(session, _reference(case)).diff <= F32_TOLERANCE
