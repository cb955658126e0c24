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


@pytest.mark.parametrize("family", [
    pytest.param(name, marks=pytest.mark.shard_group(name))
    for name in ("llama", "qwen3", "gemma2", "phi3")])
def test_webgpu_package_in_chromium(tmp_path, family):
    assert chromium_path(), "chromium is not installed (./bazelw installs Debian's chromium)"
    checkpoint = ep_suite.Checkpoints(tmp_path / "ckpt").folder(family)
    out = str(tmp_path / "pkg")
    build(checkpoint, execution_provider="webgpu", dtype="f32").save(out)
    case = write_decoder_case(os.path.join(out, "model.onnx"), str(tmp_path / "case"), pad=0)
    result = run_in_chromium(case, str(tmp_path / "profile"))
    assert "error" not in result, result["error"]
    assert result["adapter"], "no WebGPU adapter"
    assert len(result["steps"]) == 4 and max(result["steps"]) <= TOLERANCE, result
