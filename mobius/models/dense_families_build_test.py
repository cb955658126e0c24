"""L1 for the dense decoder families (the "dense" cohort): each builds for every built-in EP
and every dtype the EP's capabilities allow, and the saved model passes the full
ONNX checker; onnx-standard graphs hold standard-domain ops only."""

from __future__ import annotations

import os

import onnx
import pytest

from mobius.builder import build
from mobius.ep.registry import ep_registry
from mobius.models.registry import cohort
from mobius.optimize.histogram import op_histogram
from mobius.weights.dtypes import SHORT_NAMES
from testing.hf_checkpoints import seed0_checkpoint

#: the families that declare the "dense" cohort (mobius/models/family.py)
PRESETS = [family.tiny_preset for family in cohort("dense")]

CASES = [
    pytest.param(preset, caps.name, SHORT_NAMES[dtype], id=f"{preset[5:]}-{caps.name}-"
                 f"{SHORT_NAMES[dtype]}", marks=pytest.mark.shard_group(preset))
    for preset in PRESETS
    for caps in ep_registry
    if caps.tasks is None or "text-generation" in caps.tasks
    for dtype in sorted(caps.dtypes, key=lambda d: SHORT_NAMES[d])
]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Every parameter random (biases and norms included): graphs as for a real checkpoint."""
    made = {}

    def get(preset: str) -> str:
        if preset not in made:
            made[preset] = seed0_checkpoint(str(tmp_path_factory.mktemp(preset)), preset)
        return made[preset]

    return get


@pytest.mark.parametrize("preset,ep,dtype", CASES)
def test_builds_for_every_ep_and_dtype(checkpoints, tmp_path, preset, ep, dtype):
    package = build(checkpoints(preset), execution_provider=ep, dtype=dtype)
    if ep == "onnx-standard":
        histogram = op_histogram(package.models["model"])
        assert all(op.split("::")[0] in ("", "ai.onnx") for op in histogram if "::" in op)
    path = package.save(str(tmp_path / "pkg"), overwrite=True)
    onnx.checker.check_model(os.path.join(path, "model.onnx"), full_check=True)
