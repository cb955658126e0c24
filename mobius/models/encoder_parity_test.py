"""L3 for the encoder families (Task.reference.runner "single_pass": feature extraction,
text- and token-classification): ONNX vs the task's transformers auto class, and vs
sentence-transformers for checkpoints that carry its pooling, on a right-padded batch
of 2 (row 1 padded by 3), per-token outputs at real positions only.

f32 must match to 1e-4 on every output (last_hidden_state, sentence_embedding,
logits). f16 and bf16 builds run on onnxruntime's CPU EP against the f32 reference
(tolerances below).
"""

from __future__ import annotations

import os

import numpy as np
import onnx_ir
import pytest

from mobius.context import build_context
from mobius.models import encoder_parity_cases as cases
from mobius.models.encoder_parity_cases import EMBEDDERS, ENCODERS, POOLINGS
from testing import encoder_runs
from testing.encoder_runs import encoder_parity
from testing.model_runs import (build_package, family_checkpoint, op_counts,
                                ort_session)
from testing.reference_cases import case_dir

F32_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(folder, transformers' recorded outputs): the seed-0 checkpoint per family, and the
    sentence-transformers pipelines around it (encoder_parity_cases.py)."""

    def get(family, pooling=None):
        if pooling is None:
            root = tmp_path_factory.mktemp(family.name)
            folder = family_checkpoint(str(root / "ckpt"), family)
            recorded = case_dir(cases, family.name)
        else:
            recorded = case_dir(cases, f"{family.name}__{pooling}")
            folder = os.path.join(recorded, "st")
        return folder, encoder_runs.load(os.path.join(recorded, "reference.npz"))

    return get


def _run(checkpoint, tmp_path, dtype="f32"):
    folder, reference = checkpoint
    built = build_package(folder, tmp_path / f"onnx-{dtype}", dtype)
    return encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), reference,
                          built.config)


def _output_names(family, config):
    with build_context(None, onnx_ir.DataType.FLOAT):
        module = family.module(config)
    return {spec.name for spec in family.task.io(module, config)["model"].outputs}


@pytest.mark.parametrize("family", ENCODERS, ids=lambda f: f.name)
def test_f32_outputs(family, checkpoint, tmp_path):
    folder, reference = checkpoint(family)
    built = build_package(folder, tmp_path / "onnx", "f32")
    run = encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), reference,
                         built.config)
    assert set(run.diffs) == _output_names(family, built.config)
    assert max(run.diffs.values()) <= F32_TOLERANCE, f"{family.name}: {run.diffs}"


#: one family per distinct attention form: padding mask (BERT, DistilBERT), relative
#: position bias in the mask (MPNet), disentangled scores reading the split heads
#: (DeBERTa-v2); ModernBERT's RoPE keeps standard Attention (unfused, same graph)
FUSED = ("bert-tok-cls", "distilbert-mlm", "mpnet", "deberta-v2-seq-cls", "modernbert")


@pytest.mark.parametrize("family", [f for f in ENCODERS if f.name in FUSED], ids=lambda f: f.name)
def test_cpu_build_f32_outputs(family, checkpoint, tmp_path):
    """The cpu EP's MultiHeadAttention keeps f32 parity on the padded batch."""
    folder, reference = checkpoint(family)
    built = build_package(folder, tmp_path / "onnx", "f32", ep="cpu")
    ops = op_counts(built.model_path)
    fused = family.name != "modernbert"
    assert (ops.get("com.microsoft::MultiHeadAttention", 0) > 0) == fused, ops
    assert ("Attention" in ops) != fused, ops
    run = encoder_parity(ort_session(built.model_path), reference, built.config)
    assert max(run.diffs.values()) <= F32_TOLERANCE, f"{family.name}: {run.diffs}"


@pytest.mark.parametrize("pooling", sorted(POOLINGS))
@pytest.mark.parametrize("family", EMBEDDERS, ids=lambda f: f.name)
def test_f32_sentence_embedding(family, pooling, checkpoint, tmp_path):
    run = _run(checkpoint(family, pooling), tmp_path)
    assert set(run.diffs) == {"last_hidden_state", "sentence_embedding"}
    assert max(run.diffs.values()) <= F32_TOLERANCE, f"{family.name} {pooling}: {run.diffs}"
    modes, normalize = POOLINGS[pooling]
    embedding = run.onnx["sentence_embedding"]
    assert embedding.shape[-1] == len(modes) * run.onnx["last_hidden_state"].shape[-1]
    norms = np.linalg.norm(embedding, axis=-1)
    assert np.allclose(norms, 1.0, atol=1e-5) == normalize, norms


def test_padding_matters_for_this_batch(checkpoint, tmp_path):
    """Guards the padded-batch cases: with the mask ignored, mean pooling of the padded
    row really differs (so a build that dropped the mask would fail)."""
    run = _run(checkpoint(EMBEDDERS[0], "mean_normalized"), tmp_path)
    hidden, mask = run.reference["last_hidden_state"], run.feeds["attention_mask"]
    unmasked = hidden[1].mean(0) / np.linalg.norm(hidden[1].mean(0))
    assert np.abs(unmasked - run.reference["sentence_embedding"][1]).max() > 100 * F32_TOLERANCE
    assert not mask[1].all()


# f16 / bf16: |onnx_lowp - reference_f32| <= 4 * eps(dtype) * max(1, max|ref|).
# f16 rounds every weight and activation (eps/2 each); bf16 (the default EP computes
# bf16 builds in float32) rounds the weights and the outputs. Post-LayerNorm hidden
# states are O(1) and each of the 2-3 tiny layers re-normalizes, so the error does not
# grow with depth. Measured on these checkpoints: 0.7-1.25 eps on last_hidden_state
# (MPNet f16 the most), 0.13-0.34 eps on the normalized sentence_embedding, 0.02-0.73
# eps on classifier / fill-mask logits (both dtypes), so 4 eps leaves >= 3x headroom
# while a wrong mask, position, head or bias is off by O(0.1) or more.
EPS = {"f16": 2.0**-10, "bf16": 2.0**-7}


@pytest.mark.parametrize("dtype", sorted(EPS))
@pytest.mark.parametrize("family", ENCODERS, ids=lambda f: f.name)
def test_low_precision_close_to_f32_reference(family, dtype, checkpoint, tmp_path):
    run = _run(checkpoint(family, "mean_normalized" if family in EMBEDDERS else None),
               tmp_path, dtype)
    for name, diff in run.diffs.items():
        assert np.isfinite(run.onnx[name]).all()
        atol = 4 * EPS[dtype] * max(1.0, float(np.abs(run.reference[name]).max()))
        assert diff <= atol, f"{family.name} {dtype} {name}: {diff:.3g} > {atol:.3g}"
