"""transformers' side of rms_norm_test (//rules:references.bzl): LlamaRMSNorm's output on
each case's random weight and input, recorded with them (testing/recorded_arrays)."""

from __future__ import annotations

import numpy as np

SIZE = 40

CASES = ["bf16", "epsilon", "f16", "f32_eps_1e-05", "f32_eps_1e-06"]


def _inputs(case: str) -> tuple[np.ndarray, np.ndarray, float, np.dtype]:
    """(weight, x, eps, x's dtype) of the case, drawn as the test always drew them."""
    import ml_dtypes

    if case == "epsilon":  # inputs ~1e-3: eps = 1e-2 dominates the mean square
        rng = np.random.default_rng(1)
        x = (rng.standard_normal((1, 2, SIZE)) * 1e-3).astype(np.float32)
        return np.ones(SIZE, np.float32), x, 1e-2, x.dtype
    half = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}.get(case)
    rng = np.random.default_rng(0 if half is None else 2)
    weight = (1 + 0.2 * rng.standard_normal(SIZE)).astype(np.float32)
    if half is None:
        x = rng.standard_normal((2, 5, SIZE)).astype(np.float32) * 3
        return weight, x, float(case.rsplit("_", 1)[1]), x.dtype
    x = rng.standard_normal((2, 3, SIZE)).astype(half)
    return weight, x, 1e-6, x.dtype


def write_case(case: str, folder: str) -> None:
    """arrays.npz: weight, x (float32 values of the case's dtype), eps and transformers' y,
    with the weight rounded to the input dtype first (as a half-precision build stores it)."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from testing import recorded_arrays

    weight, x, eps, np_dtype = _inputs(case)
    module = LlamaRMSNorm(SIZE, eps=eps)
    with torch.no_grad():
        module.weight.copy_(torch.from_numpy(weight.astype(np_dtype).astype(np.float32)))
        y = module(torch.from_numpy(x.astype(np.float32))).numpy()
    recorded_arrays.save(folder, {"weight": weight, "x": x.astype(np.float32),
                                  "eps": np.float64(eps), "y": y})
