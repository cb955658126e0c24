"""onnxruntime-web's WebGPU backend runs mobius webgpu packages in headless Chromium.

Debian's chromium gets a WebGPU adapter on SwiftShader (Vulkan on the CPU), so
this is the browser's real WebGPU path: the page replays Python onnxruntime's
prefill + cached decode steps and must match its logits within 1e-5.

The batch is unpadded: with left padding, onnxruntime's WebGPU
GroupQueryAttention (fused RoPE) caches a padded row's keys unlike its CPU
kernel (see docs/eps.md, fused RoPE with left padding), so decode steps of
that row differ by ~0.1 while prefill still matches.
"""

import os

import pytest

from mobius.builder import build
from testing import ep_suite
from testing.js.browser import chromium_path, run_in_chromium
from testing.js.decoder_cases import write_decoder_case

TOLERANCE = 1e-5
FAMILIES = ("llama", "qwen3", "gemma2", "phi3")


@pytest.fixture(scope="module")
def browser_run(tmp_path_factory):
    """One Chromium start replays every family's webgpu package (a start costs seconds)."""
    assert chromium_path(), "chromium is not installed (./bazelw installs Debian's chromium)"
    root = tmp_path_factory.mktemp("browser")
    checkpoints = ep_suite.Checkpoints(root / "ckpt")
    cases = []
    for family in FAMILIES:
        out = str(root / "pkg" / family)
        build(checkpoints.folder(family), execution_provider="webgpu", dtype="f32").save(out)
        cases.append(write_decoder_case(os.path.join(out, "model.onnx"),
                                        str(root / "case" / family), pad=0))
    result = run_in_chromium(cases, str(root / "profile"))
    assert "error" not in result, result["error"]
    assert result["adapter"], "no WebGPU adapter"
    return dict(zip(FAMILIES, result["results"]))


@pytest.mark.parametrize("family", FAMILIES)
def test_webgpu_package_in_chromium(browser_run, family):
    result = browser_run[family]
    assert "error" not in result, result["error"]
    assert len(result["steps"]) == 4 and max(result["steps"]) <= TOLERANCE, result
