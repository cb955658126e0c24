"""L3 for the image families (Task.reference.runner "image_pass": image-classification,
image-feature-extraction, zero-shot-image-classification): ONNX vs the task's
transformers auto class on a batch of 2 random images (zero-shot: and 3 label
prompts, CLIP's last one right-padded), on every output of the package.

f32 must match to 1e-4 on every output. f16 and bf16 builds run on onnxruntime's
CPU EP against the f32 reference, within 4 eps (below). Config switches the
families read get their own cases.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import vision_parity_cases as cases
from mobius.models.vision_parity_cases import BY_NAME, IMAGE_FAMILIES, SWITCHES
from testing import vision_runs
from testing.model_runs import (NUMPY_DTYPES, build_package, family_checkpoint, op_counts,
                                ort_session)
from testing.reference_cases import case_dir
from testing.vision_runs import image_parity

F32_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(the family's seed-0 checkpoint, transformers' recorded outputs on it)."""
    made = {}

    def get(family):
        if family.name not in made:
            folder = tmp_path_factory.mktemp(family.name) / "ckpt"
            made[family.name] = family_checkpoint(str(folder), family)
        return made[family.name], _reference(family.name)

    return get


def _reference(case: str) -> vision_runs.ImageReference:
    return vision_runs.load(os.path.join(case_dir(cases, case), "reference.npz"))


def _run(checkpoint, tmp_path, dtype="f32"):
    folder, reference = checkpoint
    built = build_package(folder, tmp_path / f"onnx-{dtype}", dtype)
    session = ort_session(os.path.join(built.path, "model.onnx"))
    return image_parity(session, reference, built.config, NUMPY_DTYPES[dtype]), built


def _output_names(family, config) -> set[str]:
    """The outputs the task's contract gives this family's package."""
    import onnx_ir

    from mobius.context import build_context

    with build_context(None, onnx_ir.DataType.FLOAT):
        module = family.module(config)
    return {spec.name for spec in family.task.io(module, config)["model"].outputs}


def test_every_image_task_has_families():
    tasks = {f.task.name for f in IMAGE_FAMILIES}
    assert tasks == {"image-classification", "image-feature-extraction",
                     "zero-shot-image-classification"}
    assert len(IMAGE_FAMILIES) == 10
    # every feature-extraction preset has a pooled output (SigLIP's head is on by default)
    from mobius.tiny.presets import TINY_PRESETS

    for family in IMAGE_FAMILIES:
        config = family.make_config(TINY_PRESETS[family.tiny_preset])
        if family.task.name == "image-feature-extraction":
            assert _output_names(family, config) == {"last_hidden_state", "pooler_output"}


@pytest.mark.parametrize("family", IMAGE_FAMILIES, ids=lambda f: f.name)
def test_f32_outputs(family, checkpoint, tmp_path):
    run, built = _run(checkpoint(family), tmp_path)
    assert set(run.diffs) == _output_names(family, built.config)
    assert set(run.diffs) <= set(family.task.reference.outputs)
    assert max(run.diffs.values()) <= F32_TOLERANCE, f"{family.name}: {run.diffs}"
    with open(os.path.join(built.path, "preprocessor_config.json")) as f:
        packaged = json.load(f)
    with open(os.path.join(checkpoint(family)[0], "preprocessor_config.json")) as f:
        assert packaged == json.load(f)


#: towers with and without a mask (CLIP's text tower: causal + padding), SigLIP's
#: attention-pooling head (a probe query over the patches), ViT's plain encoder
FUSED = ("clip", "siglip", "vit-img-cls", "dinov2")


@pytest.mark.parametrize("family", [f for f in IMAGE_FAMILIES if f.name in FUSED],
                         ids=lambda f: f.name)
def test_cpu_build_f32_outputs(family, checkpoint, tmp_path):
    """The cpu EP's MultiHeadAttention (and CLIP's QuickGelu) keep f32 parity."""
    folder, reference = checkpoint(family)
    built = build_package(folder, tmp_path / "onnx", "f32", ep="cpu")
    ops = op_counts(built.model_path)
    assert ops.get("com.microsoft::MultiHeadAttention", 0) > 0 and "Attention" not in ops, ops
    quick = family.name == "clip"
    assert (ops.get("com.microsoft::QuickGelu", 0) > 0) == quick, ops
    run = image_parity(ort_session(built.model_path), reference, built.config)
    assert max(run.diffs.values()) <= F32_TOLERANCE, f"{family.name}: {run.diffs}"


# f16 / bf16: |onnx_lowp - reference_f32| <= 4 * eps(dtype) * max(1, max|ref|), as for
# the text encoders (mobius/models/encoder_parity_test.py): every layer re-normalizes.
# Measured on these checkpoints: at most 1.9 eps (f16, CLIP's logits_per_image, scaled
# by exp(logit_scale)) and 1.0 eps (bf16), so 4 eps leaves 2x headroom while a
# wrong position, scale or bias is off by O(0.1).
EPS = {"f16": 2.0**-10, "bf16": 2.0**-7}


@pytest.mark.parametrize("dtype", sorted(EPS))
@pytest.mark.parametrize("family", IMAGE_FAMILIES, ids=lambda f: f.name)
def test_low_precision_close_to_f32_reference(family, dtype, checkpoint, tmp_path):
    run, _ = _run(checkpoint(family), tmp_path, dtype)
    for name, diff in run.diffs.items():
        assert np.isfinite(run.onnx[name]).all()
        atol = 4 * EPS[dtype] * max(1.0, float(np.abs(run.reference[name]).max()))
        assert diff <= atol, f"{family.name} {dtype} {name}: {diff:.3g} > {atol:.3g}"


def _switched(case: str) -> tuple[str, vision_runs.ImageReference]:
    """A switched checkpoint of vision_parity_cases.py and transformers' outputs on it."""
    return os.path.join(case_dir(cases, case), "ckpt"), _reference(case)


@pytest.mark.parametrize("case", sorted(SWITCHES))
def test_config_switches(case, tmp_path):
    run, _ = _run(_switched(case), tmp_path)
    assert max(run.diffs.values()) <= F32_TOLERANCE, f"{case}: {run.diffs}"
    if case == "siglip-vision-no-head":
        assert set(run.onnx) == {"last_hidden_state"}
    if case == "vit-pooler-size-act":
        assert run.onnx["pooler_output"].shape == (2, 24)
        assert (run.onnx["pooler_output"] >= 0).all()


def test_clip_legacy_eos_pooling(tmp_path):
    """eos_token_id 2 (configs from before transformers fixed it): CLIP pools at the
    largest token id, not at the first eos."""
    run, _ = _run(_switched("clip-legacy-eos"), tmp_path)
    assert max(run.diffs.values()) <= F32_TOLERANCE, run.diffs
    ids = run.feeds["input_ids"]
    assert (ids.argmax(-1) != (ids == 2).argmax(-1)).any()  # the two rules differ here


@pytest.mark.parametrize("name,overrides,error", [
    ("dinov2", {"use_swiglu_ffn": True}, UnsupportedModelError),
    ("vit", {"image_size": 36}, ConfigError),
])
def test_refused_configs_write_nothing(name, overrides, error, tmp_path):
    from mobius.tiny.presets import TINY_PRESETS

    folder = tmp_path / "ckpt"
    folder.mkdir()
    raw = {**TINY_PRESETS[BY_NAME[name].tiny_preset], **overrides}
    (folder / "config.json").write_text(json.dumps(raw))
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(error) as caught:
        build_package(folder, tmp_path / "out")
    assert "\n" not in str(caught.value)
    assert not os.path.exists(tmp_path / "out")
