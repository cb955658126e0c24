"""FP8 checkpoints read as their float weights: exact values, ragged blocks, refusals, memory.

Files are real safetensors written by the safetensors library (codes from
ml_dtypes); the expected values are computed here element-wise from the codes
and the scale grid, independently of mobius/weights/fp8.py.
"""

from __future__ import annotations

import os
import tracemalloc

import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from mobius.errors import WeightsError
from mobius.weights.dequantized_checkpoint import DequantizedCheckpoint
from mobius.weights.prequantized_checkpoint import open_checkpoint
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint

W = "model.layers.0.mlp.down_proj.weight"
E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def _config(block=(16, 16), **extra) -> dict:
    return {"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
                                    "weight_block_size": None if block is None else list(block),
                                    **extra}}


def _codes(shape, dtype=E4M3, seed=0) -> np.ndarray:
    """Every finite code of the format, at random (NaN bytes excluded)."""
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 40
    return values.astype(dtype)


def _expected(codes: np.ndarray, scales: np.ndarray, block) -> np.ndarray:
    """Element by element: code times the scale of the block holding it."""
    out = np.empty(codes.shape, np.float32)
    for index in np.ndindex(*codes.shape):
        *lead, n, k = index
        scale = scales.reshape(()) if block is None else scales[(*lead, n // block[0],
                                                                 k // block[1])]
        out[index] = np.float32(codes[index].astype(np.float32)) * np.float32(scale)
    return out


def _folder(tmp_path, tensors: dict) -> str:
    folder = str(tmp_path / "ckpt")
    os.makedirs(folder, exist_ok=True)
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()},
              os.path.join(folder, "model.safetensors"))
    return folder


def _scales(grid, dtype=np.float32, seed=1) -> np.ndarray:
    return (np.random.default_rng(seed).uniform(1e-3, 2e-2, grid)).astype(dtype)


CASES = {
    # name: (weight shape, block, codes dtype, scales dtype)
    "ragged-rows-and-cols": ((40, 50), (16, 16), E4M3, np.float32),
    "one-short-block": ((20, 30), (128, 128), E4M3, np.float32),
    "exact-blocks-bf16-scales": ((32, 48), (16, 16), E4M3, ml_dtypes.bfloat16),
    "e5m2-f16-scales": ((24, 40), (16, 8), E5M2, np.float16),
    "stacked-experts": ((3, 40, 24), (16, 16), E4M3, np.float32),
    "per-tensor": ((24, 40), None, E4M3, np.float32),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dequantized_values_are_exact(case, tmp_path):
    shape, block, dtype, scale_dtype = CASES[case]
    codes = _codes(shape, dtype)
    grid = () if block is None else (*shape[:-2], *(-(-d // b) for d, b in zip(shape[-2:], block)))
    scales = _scales(grid, scale_dtype)
    checkpoint = open_checkpoint(_folder(tmp_path, {W: codes, W + "_scale_inv": scales,
                                                    "model.norm.weight": np.ones(4, np.float32)}),
                                 _config(block))
    assert isinstance(checkpoint, DequantizedCheckpoint)
    assert sorted(checkpoint.names()) == [W, "model.norm.weight"]  # the scales are hidden
    info = checkpoint.info(W)
    assert (info.shape, info.dtype) == (shape, np.dtype(np.float32))
    expected = _expected(codes, scales, block)
    np.testing.assert_array_equal(checkpoint.read(W), expected)
    for start, stop in ((0, 1), (3, 17), (15, 16), (17, shape[0])):  # any rows, any alignment
        np.testing.assert_array_equal(checkpoint.read_rows(W, start, stop), expected[start:stop])
    assert not checkpoint.is_stored_as_read(W) and checkpoint.is_stored_as_read("model.norm.weight")


@pytest.mark.parametrize("stored", [np.uint8, ml_dtypes.float8_e8m0fnu])  # U8, F8_E8M0
def test_e8m0_scales_are_powers_of_two(tmp_path, stored):
    codes = _codes((40, 20))
    exponents = np.random.default_rng(2).integers(110, 135, (3, 2)).astype(np.uint8)
    checkpoint = open_checkpoint(_folder(tmp_path, {W: codes,
                                                    W + "_scale_inv": exponents.view(stored)}),
                                 _config(scale_fmt="ue8m0"))
    expected = _expected(codes, np.exp2(exponents.astype(np.float64) - 127), (16, 16))
    np.testing.assert_array_equal(checkpoint.read(W), expected)


@pytest.mark.parametrize("dtype, name", [(E4M3, "F8_E4M3"), (E5M2, "F8_E5M2")])
def test_fp8_without_quantization_config_is_named_not_corrupt(tmp_path, dtype, name):
    folder = _folder(tmp_path, {"model.norm.weight": np.ones(4, np.float32),
                                W: _codes((8, 8), dtype)})
    with pytest.raises(WeightsError) as info:
        open_checkpoint(folder, {"model_type": "llama"})
    assert str(info.value) == (
        f"model.safetensors: tensor {W} has dtype {name} (FP8) and config.json has no "
        f"quantization_config; FP8 weights need their block scales (quant_method fp8)")


def test_unknown_safetensors_dtype_is_named(tmp_path):
    folder = _folder(tmp_path, {W: np.zeros(4, np.float32)})
    path = os.path.join(folder, "model.safetensors")
    data = bytearray(open(path, "rb").read())
    at = data.index(b'"F32"')
    data[at:at + 5] = b'"F4" '  # same header length: only the dtype differs
    open(path, "wb").write(bytes(data))
    with pytest.raises(WeightsError, match=f"tensor '{W}' has dtype 'F4', which mobius does not"):
        SafetensorsCheckpoint(folder)


BAD = {
    "scale-grid": ({W: _codes((40, 50)), W + "_scale_inv": _scales((3, 3))}, _config(),
                   f"'{W}_scale_inv' has shape [3, 3] but {W} [40, 50] with weight_block_size "
                   f"[16, 16] implies [3, 4]"),
    "codes-not-fp8": ({W: np.zeros((16, 16), np.float32), W + "_scale_inv": _scales((1, 1))},
                      _config(), f"'{W}' has dtype F32; an FP8 weight"),
    "scale-dtype": ({W: _codes((16, 16)), W + "_scale_inv": np.ones((1, 1), np.int32)},
                    _config(), "has dtype I32; FP8 scales are F32, BF16 or F16"),
    "u8-scales-without-ue8m0": ({W: _codes((16, 16)), W + "_scale_inv": np.ones((1, 1), np.uint8)},
                                _config(), "has dtype U8; FP8 scales"),
    "per-tensor-grid": ({W: _codes((16, 16)), W + "_scale_inv": _scales((1, 1))}, _config(None),
                        "weight_block_size null (one scale per tensor) implies [] or [1]"),
    "scale-without-weight": ({W + "_scale_inv": _scales((1, 1)),
                              "x.weight": np.ones(2, np.float32)}, _config(),
                             f"has '{W}_scale_inv' but no '{W}'"),
    "fp8-without-scale": ({W: _codes((16, 16)), W + "_scale_inv": _scales((1, 1)),
                           "lm_head.weight": _codes((8, 16))}, _config(),
                          "'lm_head.weight' has dtype F8_E4M3 (FP8) but the checkpoint has no "
                          "'lm_head.weight_scale_inv'"),
    "no-fp8-linear": ({"x.weight": np.ones(2, np.float32)}, _config(), "no FP8 Linear"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_fp8_checkpoint_names_the_tensor(case, tmp_path):
    tensors, config, message = BAD[case]
    with pytest.raises(WeightsError) as info:
        open_checkpoint(_folder(tmp_path, tensors), config)
    assert message in str(info.value)


def test_rows_are_read_without_the_whole_tensor(tmp_path):
    """Streamed: a band of rows allocates about that band, the whole tensor about its
    float32 output (no second weight-sized temporary)."""
    shape = (2048, 1024)
    folder = _folder(tmp_path, {W: _codes(shape), W + "_scale_inv": _scales((16, 8))})
    checkpoint = open_checkpoint(folder, _config((128, 128)))
    output = shape[0] * shape[1] * 4
    tracemalloc.start()
    try:
        band = checkpoint.read_rows(W, 130, 140)
        _, band_peak = tracemalloc.get_traced_memory()
        del band
        tracemalloc.reset_peak()
        whole = checkpoint.read(W)
        _, whole_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert whole.shape == shape
    assert band_peak < output / 8, band_peak
    assert whole_peak < 1.2 * output, (whole_peak, output)


def test_static_activation_scales_are_not_read_and_say_so(tmp_path, caplog):
    """The package computes with float activations (transformers' dequantized model too)."""
    codes, scales = _codes((16, 16)), _scales((1, 1))
    folder = _folder(tmp_path, {W: codes, W + "_scale_inv": scales,
                                W.replace(".weight", ".activation_scale"): np.ones((), np.float32)})
    checkpoint = open_checkpoint(folder, _config(activation_scheme="static"))
    assert checkpoint.names() == [W]
    assert "1 static activation scales" in caplog.text and "float activations" in caplog.text
