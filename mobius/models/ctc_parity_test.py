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
from mobius.models import wav2vec2
from testing.ctc_runs import ctc_parity, run_onnx
from testing.model_runs import (NUMPY_DTYPES, build_package, make_family_checkpoint,
                                op_counts, ort_session)

F32_TOLERANCE = 1e-4
#: case -> (family, config overrides of its tiny preset)
CASES = {
    "wav2vec2": (wav2vec2.FAMILY, {}),  # group norm, post-norm, no conv bias, kernel 6
    "hubert": (wav2vec2.HUBERT, {}),  # layer norm + mask, stable, conv bias
    # encoder eps 1e-2 (the conv layers' LayerNorms keep PyTorch's 1e-5)
    "wav2vec2-layer-stable-bias": (wav2vec2.FAMILY, {
        "feat_extract_norm": "layer", "do_stable_layer_norm": True, "conv_bias": True,
        "layer_norm_eps": 1e-2}),
    # the feature encoder's activation is its own (relu here), not hidden_act
    "wav2vec2-layer-postnorm-kernel5": (wav2vec2.FAMILY, {
        "feat_extract_norm": "layer", "num_conv_pos_embeddings": 5,
        "num_conv_pos_embedding_groups": 2, "feat_extract_activation": "relu"}),
    "hubert-group-postnorm-no-proj-norm": (wav2vec2.HUBERT, {
        "feat_extract_norm": "group", "do_stable_layer_norm": False,
        "feat_proj_layer_norm": False, "hidden_act": "gelu_new"}),
    "hubert-conv-pos-batch-norm": (wav2vec2.HUBERT, {"conv_pos_batch_norm": True}),
}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    made = {}

    def get(case):
        if case not in made:
            family, overrides = CASES[case]
            folder = tmp_path_factory.mktemp(case) / "ckpt"
            made[case] = _random_statistics(make_family_checkpoint(str(folder), family,
                                                                   **overrides))
        return made[case]

    return get


def _random_statistics(folder: str) -> str:
    """BatchNorm's running statistics are buffers (transformers saves 0 and 1, which the
    parameter randomization leaves): random too, so dropping them cannot pass."""
    from safetensors.numpy import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    rng = np.random.default_rng(3)
    stats = [n for n in tensors if n.endswith((".running_mean", ".running_var"))]
    for name in stats:
        noise = rng.uniform(0.5, 1.5, tensors[name].shape) if name.endswith("var") else (
            0.2 * rng.standard_normal(tensors[name].shape))
        tensors[name] = noise.astype(np.float32)
    if stats:
        save_file(tensors, path, metadata={"format": "pt"})
    return folder


def _session(folder, out, dtype="f32", ep="default"):
    built = build_package(folder, out, dtype, ep)
    return ort_session(built.model_path), built


@pytest.mark.parametrize("case", sorted(CASES))
def test_f32_logits(case, checkpoint, tmp_path):
    folder = checkpoint(case)
    session, _ = _session(folder, tmp_path / "onnx")
    with open(os.path.join(folder, "config.json")) as f:
        layer = json.load(f)["feat_extract_norm"] == "layer"
    inputs = [i.name for i in session.get_inputs()]
    assert inputs == (["input_values", "attention_mask"] if layer else ["input_values"])
    run = ctc_parity(session, folder)
    assert run.onnx.shape == (2, 79, 37)
    print(f"{case} f32: {run.diff:.3g}")
    assert run.diff <= F32_TOLERANCE, f"{case}: {run.diff:.3g}"


def test_attention_mask_matters(checkpoint, tmp_path):
    """Guards the padded cases: the padded row's real frames change when the mask is
    all ones, so a graph that ignored attention_mask would fail test_f32_logits."""
    folder = checkpoint("hubert")
    session, _ = _session(folder, tmp_path / "onnx")
    run = ctc_parity(session, folder)
    unmasked = dict(run.feeds, attention_mask=np.ones_like(run.feeds["attention_mask"]))
    changed = np.abs(run_onnx(session, unmasked, np.float32) - run.reference)[1, :59]
    assert changed.max() > 100 * F32_TOLERANCE, changed.max()


def test_old_weight_norm_spelling(checkpoint, tmp_path):
    """Checkpoints saved before torch's parametrizations name weight_norm's tensors
    weight_g / weight_v: the same weight is computed from them."""
    from safetensors.numpy import load_file, save_file

    folder = str(tmp_path / "old")
    shutil.copytree(checkpoint("wav2vec2"), folder)
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
    run = ctc_parity(session, checkpoint("wav2vec2"))  # transformers reads the new spelling
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
def test_low_precision_close_to_f32_reference(case, dtype, checkpoint, tmp_path):
    folder = checkpoint(case)
    session, _ = _session(folder, tmp_path / f"onnx-{dtype}", dtype)
    run = ctc_parity(session, folder, NUMPY_DTYPES[dtype])
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
def test_unsupported_config_is_a_clear_error(key, value, message, checkpoint, tmp_path):
    folder = str(tmp_path / "ckpt")
    shutil.copytree(checkpoint("hubert"), folder)
    config_path = os.path.join(folder, "config.json")
    with open(config_path) as f:
        raw = json.load(f)
    with open(config_path, "w") as f:
        json.dump({**raw, key: value}, f)
    with pytest.raises(ConfigError, match=message):
        mobius.build(folder).save(str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("case,mask", [("hubert", True), ("wav2vec2", False)])
def test_package_carries_the_preprocessor_config(case, mask, checkpoint, tmp_path):
    """The checkpoint's preprocessor_config.json as it is; without one, wav2vec2's
    defaults with an attention mask exactly where the graph takes one."""
    folder = str(tmp_path / "ckpt")
    shutil.copytree(checkpoint(case), folder)
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
def test_cpu_build_f32_logits(case, checkpoint, tmp_path):
    """The cpu EP's MultiHeadAttention keeps f32 parity (HuBERT: with its padding mask)."""
    folder = checkpoint(case)
    session, built = _session(folder, tmp_path / "onnx", ep="cpu")
    ops = op_counts(built.model_path)
    assert ops.get("com.microsoft::MultiHeadAttention", 0) > 0 and "Attention" not in ops, ops
    assert ctc_parity(session, folder).diff <= F32_TOLERANCE
