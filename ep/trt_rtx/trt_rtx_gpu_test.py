"""GPU (tag "gpu"): the trt-rtx package loads and runs on NvTensorRTRTXExecutionProvider.

Where the onnxruntime build has no TensorRT-RTX provider the test skips with that reason;
a machine without a GPU fails (testing/gpu.py).
"""

from __future__ import annotations

import numpy as np

import mobius
from testing import gpu, parity
from testing.hf_checkpoints import make_hf_checkpoint
from testing.model_runs import BuiltPackage, onnx_greedy


def test_trt_rtx_package_runs_on_its_provider(tmp_path):
    provider = gpu.require_provider("trt-rtx", optional=True)
    folder = make_hf_checkpoint(str(tmp_path / "ckpt"), "tiny-llama")
    package = mobius.build(folder, execution_provider="trt-rtx", dtype="f16", prefill_logits="all")
    built = BuiltPackage(package.save(str(tmp_path / "pkg")), package.config, "f16")
    session = gpu.session(built.model_path, provider)
    ids, mask = parity.make_batch(built.config.vocab_size)
    logits, tokens = onnx_greedy(session, built.config, ids, mask, 2, np.float16)
    assert all(np.isfinite(step).all() for step in logits) and len(tokens) == 2
