"""Build dtype names and numpy float conversion (f32 <-> f16 <-> bf16) without torch."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest

from mobius.errors import MobiusError, WeightsError
from mobius.weights.dtypes import (SHORT_NAMES, check_source_dtype, convert_array, convert_into,
                                   numpy_dtype, parse_dtype)

F32, F16, BF16 = ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16


@pytest.mark.parametrize(
    "name, expected",
    [("f32", F32), ("fp32", F32), ("float32", F32), ("F32", F32),
     ("f16", F16), ("fp16", F16), ("float16", F16), ("FP16", F16),
     ("bf16", BF16), ("bfloat16", BF16), ("BF16", BF16)],
)
def test_parse_dtype_names(name, expected):
    assert parse_dtype(name) is expected


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_parse_dtype_accepts_onnx_dtypes(dtype):
    assert parse_dtype(dtype) is dtype
    assert parse_dtype(SHORT_NAMES[dtype]) is dtype


@pytest.mark.parametrize("name", ["int8", "f64", "fp8", "", "f 16", "half"])
def test_parse_dtype_unknown_names(name):
    with pytest.raises(MobiusError, match=r"unknown dtype .*choose one of f32, f16, bf16"):
        parse_dtype(name)


@pytest.mark.parametrize("dtype", [ir.DataType.DOUBLE, ir.DataType.INT8, ir.DataType.INT64])
def test_parse_dtype_unsupported_onnx_dtype(dtype):
    with pytest.raises(MobiusError, match=f"unsupported dtype {dtype.name}"):
        parse_dtype(dtype)


def test_numpy_dtype():
    assert numpy_dtype(F32) == np.float32
    assert numpy_dtype(F16) == np.float16
    assert numpy_dtype(BF16) == np.dtype(ml_dtypes.bfloat16)


def _samples() -> np.ndarray:
    rng = np.random.default_rng(0)
    values = rng.standard_normal(1000).astype(np.float32) * 10
    specials = np.array([0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, 65504.0, 1e-3], np.float32)
    return np.concatenate([values, specials])


@pytest.mark.parametrize("target", [F32, F16, BF16])
def test_convert_from_f32(target):
    source = _samples()
    out = convert_array(source, target, "w")
    assert out.dtype == numpy_dtype(target)
    assert out.shape == source.shape
    # Round to nearest even, exactly as numpy/ml_dtypes cast.
    expected = source.astype(numpy_dtype(target))
    np.testing.assert_array_equal(out.view(np.uint8), expected.view(np.uint8))


def test_convert_bf16_rounds_to_nearest_even():
    # 1 + 2^-8 lies exactly halfway between two bf16 values (1 and 1 + 2^-7): ties go to even (1).
    # 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: ties go to even (1 + 2^-6).
    source = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20], np.float32)
    out = convert_array(source, BF16, "w").astype(np.float32)
    np.testing.assert_array_equal(out, [1.0, 1 + 2**-6, 1 + 2**-7])


@pytest.mark.parametrize("source_dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("target", [F32, F16, BF16])
def test_convert_between_half_types(source_dtype, target):
    source = _samples().astype(source_dtype)
    source = source[source.astype(np.float32) != 65536]  # 65504 in bf16: beyond f16's range
    out = convert_array(source, target, "w")
    assert out.dtype == numpy_dtype(target)
    expected = source.astype(np.float32).astype(numpy_dtype(target))
    np.testing.assert_array_equal(out.view(np.uint8), expected.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_half_to_f32_is_exact(dtype):
    source = _samples().astype(dtype)
    back = convert_array(convert_array(source, F32, "w"), parse_dtype(
        "f16" if dtype == np.float16 else "bf16"), "w")
    np.testing.assert_array_equal(back.view(np.uint16), source.view(np.uint16))


@pytest.mark.parametrize("value, source, target", [
    (1e6, np.float32, F16), (-7e4, np.float32, F16), (1e300, np.float64, F32),
    (1e300, np.float64, BF16), (1e5, ml_dtypes.bfloat16, F16)])
def test_a_cast_that_overflows_to_inf_names_the_tensor(value, source, target):
    array = np.array([[0.5, value], [1.0, 2.0]], source)
    with pytest.raises(WeightsError, match=r"tensor 'layers.0.w' holds .*beyond the range of "
                       r"(f32|f16|bf16).*(--dtype f32 or bf16|the checkpoint needs fixing)"):
        convert_array(array, target, "layers.0.w")
    out = np.empty((2, 2), numpy_dtype(target))
    with pytest.raises(WeightsError, match="'layers.0.w'"):
        convert_into(array, out, "layers.0.w")


def test_nan_and_inf_of_the_source_are_kept_not_refused():
    source = np.array([np.nan, np.inf, -np.inf, 1.0], np.float64)
    out = convert_array(source, F16, "w")
    assert np.isnan(out[0]) and np.isposinf(out[1]) and np.isneginf(out[2]) and out[3] == 1
    # bf16 has float32's range: no overflow.
    wide = convert_array(np.array([1e30], np.float32), BF16, "w")
    assert np.isfinite(wide.astype(np.float32)).all()


def test_an_overflow_beside_a_nan_of_the_source_is_still_refused():
    with pytest.raises(WeightsError, match="'w' holds 1e\\+06"):
        convert_array(np.array([np.nan, 1e6], np.float32), F16, "w")


def test_same_dtype_is_returned_unchanged():
    source = _samples()
    assert convert_array(source, F32, "w") is source


def test_float64_source():
    source = np.array([0.1, 1e-8, 3.0], np.float64)
    np.testing.assert_array_equal(convert_array(source, F32, "w"), source.astype(np.float32))
    np.testing.assert_array_equal(
        convert_array(source, BF16, "w").view(np.uint16),
        source.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16),
    )


def test_no_torch_needed():
    import os
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "sys.modules['torch'] = None  # any 'import torch' now raises ImportError\n"
        "from mobius.weights.dtypes import convert_array, parse_dtype\n"
        "out = convert_array(np.ones(4, np.float32), parse_dtype('bf16'), 'w')\n"
        "assert str(out.dtype) == 'bfloat16'\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root}
    result = subprocess.run([sys.executable, "-c", code], cwd=root, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("source", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("target", [F32, F16, BF16])
def test_convert_into_equals_convert_array_chunk_by_chunk(source, target):
    """Over 1M values (several chunks), into a C-contiguous array and a strided view."""
    array = np.random.default_rng(3).standard_normal((1030, 1100)).astype(source)
    want = convert_array(array, target, "w")
    out = np.empty_like(want)
    convert_into(array, out, "w")
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    wide = np.zeros((1030, 1101), numpy_dtype(target))
    convert_into(array, wide[:, 1:], "w")
    np.testing.assert_array_equal(wide[:, 1:].astype(np.float32), want.astype(np.float32))
    assert not wide[:, 0].any()


def test_convert_into_refuses_another_size():
    with pytest.raises(ValueError, match="cannot write 6 values into 5"):
        convert_into(np.zeros(6, np.float32), np.zeros(5, np.float32), "w")


@pytest.mark.parametrize("source, message", [
    (np.int32, "'w' holds int32 data but the model expects a float weight"),
    (ml_dtypes.float8_e4m3fn, "'w' has dtype F8_E4M3 (FP8) but no scales"),
    (ml_dtypes.float8_e5m2, "'w' has dtype F8_E5M2 (FP8) but no scales"),
])
def test_codes_are_not_cast_to_a_float_weight(source, message):
    """A checkpoint read without its quantization_config (e.g. a tensor outside what
    open_checkpoint saw) is refused naming the dtype, not cast without its scales."""
    with pytest.raises(WeightsError) as info:
        check_source_dtype("w", np.dtype(source), F32)
    assert message in str(info.value)
    check_source_dtype("w", np.dtype(ml_dtypes.bfloat16), F16)  # a float source is cast
