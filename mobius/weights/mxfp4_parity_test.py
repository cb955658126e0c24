"""L3 parity of an MXFP4 gpt-oss checkpoint: packages against transformers.

The checkpoint comes from testing/fp8_checkpoints.py (a tiny transformers
gpt-oss, every parameter random, its expert stacks quantized there to MXFP4
with numpy). transformers' CPU loader dequantizes MXFP4 (``Mxfp4Config(
dequantize=True)``); that model is the reference. Both are made at build time
(mxfp4_parity_cases.py).
"""

from __future__ import annotations

import os
import shutil

import pytest

from mobius.builder import build
from mobius.weights import mxfp4_parity_cases as cases
from mobius.weights.dequantized_checkpoint import DequantizedCheckpoint
from testing import decoder_reference
from testing.fp8_checkpoints import check_f32_parity, check_same_package
from testing.reference_cases import case_dir

EXPERTS, LAYERS = 5, 2  # tiny-gpt_oss


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A writable copy of the MXFP4 folder and its float one (check_f32_parity writes its
    package next to the folder)."""
    root = tmp_path_factory.mktemp("mxfp4")
    for name in ("mxfp4", "mxfp4-ref"):
        shutil.copytree(os.path.join(case_dir(cases, "mxfp4"), name), str(root / name),
                        copy_function=shutil.copyfile)
    return str(root / "mxfp4")


def test_f32_package_matches_transformers(checkpoint):
    reference = decoder_reference.load(os.path.join(case_dir(cases, "mxfp4"), "reference.npz"))
    check_f32_parity(checkpoint, reference)


def test_int4_package_equals_the_float_checkpoints(checkpoint, tmp_path):
    """--quant int4: the experts go into QMoE exactly as the float stacks would."""
    ops = check_same_package(checkpoint, checkpoint + "-ref", str(tmp_path), quant="int4",
                             execution_provider="cpu")
    assert "QMoE" in ops and "MatMulNBits" in ops


def test_experts_are_dequantized_one_expert_at_a_time(checkpoint, tmp_path, monkeypatch):
    """Fusing the experts into one MoE reads each expert of a stack once, never the whole
    stack once per expert (E times the dequantization work, E stacks resident)."""
    reads = []
    read, read_rows = DequantizedCheckpoint.read, DequantizedCheckpoint.read_rows
    monkeypatch.setattr(DequantizedCheckpoint, "read", lambda self, name: reads.append(
        (name, None)) or read(self, name))
    monkeypatch.setattr(DequantizedCheckpoint, "read_rows", lambda self, name, start, stop:
                        reads.append((name, (start, stop))) or read_rows(self, name, start, stop))
    build(checkpoint, execution_provider="cpu").save(str(tmp_path / "onnx"))
    experts = [(n, rows) for n, rows in reads if n.endswith(("gate_up_proj", "down_proj"))]
    assert sorted(experts) == sorted(
        (f"model.layers.{layer}.mlp.experts.{proj}", (e, e + 1))
        for layer in range(LAYERS) for proj in ("gate_up_proj", "down_proj")
        for e in range(EXPERTS))
