"""Reads config.json's ``quantization_config``: what a pre-quantized checkpoint is.

A checkpoint that carries one is read as what it is (GPTQ or AWQ packed
integers, FP8 or MXFP4 codes with their scales), never silently as float; any
other method is refused by name before anything is built.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from mobius.errors import ConfigError

GPTQ = "gptq"
AWQ = "awq"
FP8 = "fp8"
MXFP4 = "mxfp4"
_READABLE = (GPTQ, AWQ, FP8, MXFP4)
#: GPTQ ``checkpoint_format`` -> what is added to a stored zero point to get the
#: real one (v1, "gptq", stores zero - 1; "gptq_v2" stores the zero itself).
_GPTQ_ZERO_OFFSET = {GPTQ: 1, "gptq_v2": 0}
_GPTQ_BITS = (4, 8)
_AWQ_BITS = (4,)


@dataclasses.dataclass(frozen=True)
class PrequantizedFormat:
    """How a pre-quantized checkpoint packs its Linear weights.

    ``group_size`` None: one group spans the whole input dimension (GPTQ's -1).
    ``zero_offset``: added to each stored zero point (mod 2**bits).
    """

    method: str
    bits: int
    group_size: int | None
    zero_offset: int


@dataclasses.dataclass(frozen=True)
class Fp8Format:
    """FP8 Linears (transformers' "fine-grained FP8"), dequantized when read.

    ``block``: (rows, cols) of weight sharing one ``weight_scale_inv`` value, None:
    one scale per tensor; ``ue8m0``: the scales are stored as E8M0 exponents.
    """

    block: tuple[int, int] | None
    ue8m0: bool
    method: str = FP8


@dataclasses.dataclass(frozen=True)
class Mxfp4Format:
    """gpt-oss MXFP4 experts (``*_blocks`` / ``*_scales``), dequantized when read."""

    method: str = MXFP4


def read_quantization_config(raw: Mapping[str, Any]
                             ) -> PrequantizedFormat | Fp8Format | Mxfp4Format | None:
    """The checkpoint's quantization format, or None for a float checkpoint."""
    config = raw.get("quantization_config")
    if config is None:
        text = raw.get("text_config")  # multi-modal configs nest the decoder's
        config = text.get("quantization_config") if isinstance(text, Mapping) else None
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise ConfigError("config.json: quantization_config must be an object")
    method = str(config.get("quant_method", "")).lower()
    if method not in _READABLE:
        raise ConfigError(
            f"config.json: quantization_config.quant_method {config.get('quant_method')!r} "
            f"is not supported; mobius reads {', '.join(_READABLE)} checkpoints "
            f"(or build from the float checkpoint)"
        )
    if method == FP8:
        return _fp8(config)
    if method == MXFP4:
        return Mxfp4Format()
    return _gptq(config) if method == GPTQ else _awq(config)


def _fp8(config: Mapping[str, Any]) -> Fp8Format:
    block = config.get("weight_block_size")
    if block is not None and not (
            isinstance(block, (list, tuple)) and len(block) == 2 and all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise ConfigError(f"config.json: FP8 weight_block_size must be two positive integers "
                          f"(or null: one scale per tensor), got {block!r}")
    scale_fmt = config.get("scale_fmt", "float")
    if scale_fmt not in ("float", "ue8m0"):
        raise ConfigError(f"config.json: FP8 scale_fmt {scale_fmt!r} is not supported; "
                          f"mobius reads 'float' and 'ue8m0'")
    if config.get("expert_dtype", FP8) != FP8:
        raise ConfigError(f"config.json: FP8 expert_dtype {config.get('expert_dtype')!r} "
                          f"(packed FP4 experts) is not supported; mobius reads 'fp8'")
    if config.get("modules_to_convert"):
        raise ConfigError("config.json: FP8 modules_to_convert (FP8 embedding tables) is "
                          "not supported")
    return Fp8Format(None if block is None else (block[0], block[1]), scale_fmt == "ue8m0")


def _gptq(config: Mapping[str, Any]) -> PrequantizedFormat:
    fmt = str(config.get("checkpoint_format", GPTQ)).lower()
    if fmt not in _GPTQ_ZERO_OFFSET:
        raise ConfigError(
            f"config.json: GPTQ checkpoint_format {fmt!r} is not supported; "
            f"mobius reads {' and '.join(_GPTQ_ZERO_OFFSET)}"
        )
    if config.get("dynamic"):
        raise ConfigError("config.json: GPTQ per-module overrides (quantization_config.dynamic) "
                          "are not supported")
    bits = _int(config, ("bits",), GPTQ)
    _check_bits(bits, _GPTQ_BITS, GPTQ)
    return PrequantizedFormat(GPTQ, bits, _group_size(config, ("group_size",)),
                              _GPTQ_ZERO_OFFSET[fmt])


def _awq(config: Mapping[str, Any]) -> PrequantizedFormat:
    version = str(config.get("version", "gemm")).lower()
    if version != "gemm":
        raise ConfigError(f"config.json: AWQ version {version!r} is not supported; "
                          f"mobius reads the GEMM packing (version 'gemm')")
    if config.get("zero_point", True) is not True:
        raise ConfigError("config.json: AWQ without zero points (zero_point: false) "
                          "is not supported")
    bits = _int(config, ("bits", "w_bit"), AWQ)
    _check_bits(bits, _AWQ_BITS, AWQ)
    group_size = _group_size(config, ("group_size", "q_group_size"))
    if group_size is None:
        raise ConfigError("config.json: AWQ group_size must be a positive integer")
    return PrequantizedFormat(AWQ, bits, group_size, 0)


def _int(config: Mapping[str, Any], keys: tuple[str, ...], method: str) -> int:
    key = next((k for k in keys if k in config), None)
    value = config.get(key) if key else None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"config.json: {method.upper()} quantization_config.{keys[0]} must "
                          f"be an integer, got {value!r}")
    return value


def _check_bits(bits: int, supported: tuple[int, ...], method: str) -> None:
    if bits not in supported:
        raise ConfigError(f"config.json: {bits}-bit {method.upper()} is not supported; "
                          f"mobius reads {' or '.join(map(str, supported))}-bit")


def _group_size(config: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    method = str(config.get("quant_method")).upper()
    value = _int(config, keys, method)
    if value == -1:
        return None
    if value <= 0:
        raise ConfigError(f"config.json: {method} group_size must be positive or -1, got {value}")
    return value
