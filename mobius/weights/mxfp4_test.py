"""MXFP4 expert stacks read as their float weights: exact values, layout, refusals.

The expected values are decoded here bit by bit (sign, exponent, mantissa of
each E2M1 nibble, 2**(scale - 127) per block of 32), independently of
mobius/weights/mxfp4.py's table.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from mobius.errors import WeightsError
from mobius.weights.prequantized_checkpoint import open_checkpoint

X = "model.layers.0.mlp.experts.gate_up_proj"
CONFIG = {"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": []}}


def _e2m1(nibble: int) -> float:
    sign = -1.0 if nibble & 8 else 1.0
    exponent, mantissa = (nibble >> 1) & 3, nibble & 1
    if exponent == 0:  # subnormal: 0 or 0.5
        return sign * 0.5 * mantissa
    return sign * 2.0 ** (exponent - 1) * (1 + 0.5 * mantissa)


def _expected(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    experts, rows, groups, half = blocks.shape
    out = np.empty((experts, groups * 2 * half, rows), np.float32)
    for e, r, g, j in np.ndindex(experts, rows, groups, 2 * half):
        byte = int(blocks[e, r, g, j // 2])
        nibble = byte & 0xF if j % 2 == 0 else byte >> 4  # lower nibble first
        out[e, g * 2 * half + j, r] = _e2m1(nibble) * 2.0 ** (int(scales[e, r, g]) - 127)
    return out


def _folder(tmp_path, tensors: dict) -> str:
    folder = str(tmp_path / "ckpt")
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "model.safetensors"))
    return folder


def _random(experts=3, rows=6, groups=2, seed=0):
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (experts, rows, groups, 16)).astype(np.uint8)
    scales = rng.integers(100, 140, (experts, rows, groups)).astype(np.uint8)
    return blocks, scales


def test_experts_are_exact_and_transposed(tmp_path):
    blocks, scales = _random()
    bias = np.ones((3, 6), np.float32)
    checkpoint = open_checkpoint(_folder(tmp_path, {X + "_blocks": blocks, X + "_scales": scales,
                                                    X + "_bias": bias}), CONFIG)
    assert sorted(checkpoint.names()) == [X, X + "_bias"]
    assert checkpoint.info(X).shape == (3, 64, 6)  # [experts, inputs, outputs]
    expected = _expected(blocks, scales)
    np.testing.assert_array_equal(checkpoint.read(X), expected)
    np.testing.assert_array_equal(checkpoint.read_rows(X, 1, 3), expected[1:3])
    np.testing.assert_array_equal(checkpoint.read(X + "_bias"), bias)


def test_blocks_without_quantization_config_are_refused(tmp_path):
    blocks, scales = _random()
    folder = _folder(tmp_path, {X + "_blocks": blocks, X + "_scales": scales})
    with pytest.raises(WeightsError, match=f"MXFP4 blocks \\(e.g. '{X}_blocks'\\) but config.json "
                                           f"has no quantization_config"):
        open_checkpoint(folder, {"model_type": "gpt_oss"})


@pytest.mark.parametrize("change, message", [
    (lambda t: t.pop(X + "_scales"), f"has '{X}_blocks' but not '{X}_scales'"),
    (lambda t: t.update({X + "_scales": t[X + "_scales"][:, :5]}),
     f"'{X}_scales' has shape [3, 5, 2] but {X}_blocks [3, 6, 2, 16] implies [3, 6, 2]"),
    (lambda t: t.update({X + "_blocks": t[X + "_blocks"][..., :8].copy()}),
     "MXFP4 expert blocks are [experts, rows, blocks, 16]"),
    (lambda t: t.update({X + "_scales": t[X + "_scales"].astype(np.float32)}),
     f"'{X}_scales' is float32; expected uint8"),
    (lambda t: t.update({X: np.zeros((3, 64, 6), np.float32)}),
     f"both the float tensor '{X}' and the MXFP4 codes '{X}_blocks'"),
    (lambda t: t.clear() or t.update({"x.weight": np.ones(2, np.float32)}), "no MXFP4 tensor"),
])
def test_bad_mxfp4_checkpoint_names_the_tensor(tmp_path, change, message):
    blocks, scales = _random()
    tensors = {X + "_blocks": blocks, X + "_scales": scales}
    change(tensors)
    with pytest.raises(WeightsError) as info:
        open_checkpoint(_folder(tmp_path, {k: np.ascontiguousarray(v) for k, v in tensors.items()}),
                        CONFIG)
    assert message in str(info.value)
