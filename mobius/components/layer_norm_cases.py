"""torch's side of layer_norm_test (//rules:references.bzl): torch.nn.functional.layer_norm
on each case's random weight, bias and input (arrays.npz: weight, [bias,] x, eps, y)."""

from __future__ import annotations

import numpy as np

SIZE = 24
CASES = ["bias", "epsilon", "f16", "no_bias"]


def random_arrays(bias: bool, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """({"weight"[, "bias"]}, x [2, 5, SIZE]) drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    arrays = {"weight": (1 + 0.2 * rng.standard_normal(SIZE)).astype(np.float32)}
    if bias:
        arrays["bias"] = (0.5 * rng.standard_normal(SIZE)).astype(np.float32)
    x = (3 * rng.standard_normal((2, 5, SIZE)) + 1).astype(np.float32)
    return arrays, x


def _inputs(case: str) -> tuple[dict[str, np.ndarray], np.ndarray, float]:
    """The case's weights, x (float16 values for "f16") and eps."""
    arrays, x = random_arrays(bias=case in ("bias", "f16"))
    if case == "epsilon":  # inputs ~1e-3: eps = 1e-2 dominates the variance
        return arrays, (x * 1e-3).astype(np.float32), 1e-2
    if case == "f16":  # values ~1e3 whose mean/variance would lose digits in f16
        return arrays, (x + 1000).astype(np.float16), 1e-5
    return arrays, x, 1e-5


def write_case(case: str, folder: str) -> None:
    """arrays.npz; "f16": torch's y from the weights rounded to float16 (as the build does)."""
    import torch

    from testing import recorded_arrays

    arrays, x, eps = _inputs(case)
    weights = {k: torch.from_numpy(v.astype(x.dtype).astype(np.float32))
               for k, v in arrays.items()}
    y = torch.nn.functional.layer_norm(
        torch.from_numpy(x.astype(np.float32)), (SIZE,), weights["weight"], weights.get("bias"),
        eps).numpy()
    recorded_arrays.save(folder, {**arrays, "x": x.astype(np.float32), "eps": np.float64(eps),
                                  "y": y})
