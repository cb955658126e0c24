"""A GPTQ / AWQ checkpoint seen as the float checkpoint it stands for, plus its integers.

Each packed Linear ``<prefix>.qweight/.qzeros/.scales[/.g_idx]`` appears as
one float tensor ``<prefix>.weight`` [out, in] (dequantized when read), so
models bind to it exactly as to a float checkpoint; ``attach_weights`` tags
the bound initializer with a :class:`PrequantizedSource`, and the
quantization pass emits those integers instead of requantizing. Every packed
shape and dtype, the zero points and the group indices are checked when the
checkpoint is opened, before any graph is built; the codes are read only
when the package is saved.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from mobius.errors import WeightsError
from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.weights import awq, gptq
from mobius.weights.dequantized_checkpoint import DequantizedCheckpoint
from mobius.weights.fp8 import open_fp8
from mobius.weights.mxfp4 import BLOCKS, open_mxfp4
from mobius.weights.packed_bits import is_midpoint
from mobius.weights.quantization_config import (FP8, GPTQ, MXFP4, PrequantizedFormat,
                                                read_quantization_config)
from mobius.weights.safetensors_checkpoint import (FP8_DTYPES, SafetensorsCheckpoint, TensorInfo,
                                                   dtype_name)

#: suffixes whose presence marks a packed Linear ("scales" alone is too common a name)
_MARKERS = ("qweight", "qzeros")


@dataclasses.dataclass(frozen=True)
class PackedLinear:
    """One packed Linear: what the graph must know before its codes are read."""

    prefix: str
    out_features: int
    in_features: int
    tensors: dict[str, str]  # suffix -> checkpoint tensor name
    bits: int
    block_size: int
    symmetric: bool  # every zero point is the midpoint 2**(bits - 1)
    g_idx: np.ndarray | None  # act-order group of each input channel; None: contiguous


@dataclasses.dataclass(frozen=True)
class PrequantizedSource:
    """The integers behind one graph weight: output ``rows`` (None: all) of a packed Linear."""

    checkpoint: "PrequantizedCheckpoint"
    linear: PackedLinear
    rows: np.ndarray | None = None

    @property
    def out_features(self) -> int:
        return self.linear.out_features if self.rows is None else len(self.rows)

    def produce(self) -> QuantizedWeight:
        qw = self.checkpoint.quantized(f"{self.linear.prefix}.weight")
        if self.rows is None:
            return qw
        zeros = None if qw.zero_points is None else qw.zero_points[self.rows]
        return dataclasses.replace(qw, codes=qw.codes[self.rows], scales=qw.scales[self.rows],
                                   zero_points=zeros)


class PrequantizedCheckpoint:
    """Duck-types :class:`SafetensorsCheckpoint` (names / info / read) over the packed one."""

    def __init__(self, checkpoint: SafetensorsCheckpoint, fmt: PrequantizedFormat):
        self.folder = checkpoint.folder
        self.format = fmt
        self._inner = checkpoint
        self._gptq = fmt.method == GPTQ
        prefixes = sorted({n.rsplit(".", 1)[0] for n in checkpoint.names()
                           if n.rsplit(".", 1)[-1] in _MARKERS})
        if not prefixes:
            raise WeightsError(f"config.json declares {fmt.method.upper()} quantization but the "
                               f"checkpoint has no packed Linear (no *.qweight tensor)")
        self._linears = {f"{p}.weight": self._describe(p) for p in prefixes}
        self._packed = {name for linear in self._linears.values()
                        for name in linear.tensors.values()}

    def _describe(self, prefix: str) -> PackedLinear:
        module = gptq if self._gptq else awq
        for suffix in module.REQUIRED:
            if f"{prefix}.{suffix}" not in self._inner:
                raise WeightsError(
                    f"checkpoint is missing tensor '{prefix}.{suffix}' (a "
                    f"{self.format.method.upper()} Linear needs {', '.join(module.REQUIRED)})")
        tensors = {s: f"{prefix}.{s}" for s in (*module.REQUIRED, *module.OPTIONAL)
                   if f"{prefix}.{s}" in self._inner}
        infos = {s: self._inner.info(n) for s, n in tensors.items()}
        features = gptq.gptq_features if self._gptq else awq.awq_features
        out_features, in_features = features(prefix, {s: i.shape for s, i in infos.items()},
                                             {s: i.dtype for s, i in infos.items()}, self.format)
        qzeros = np.asarray(self._inner.read(tensors["qzeros"]))
        if self._gptq:
            zeros = gptq.gptq_zero_points(qzeros, self.format)
            block = gptq.gptq_block_size(in_features, self.format)
            g_idx = None
            if "g_idx" in tensors:
                g_idx = np.asarray(self._inner.read(tensors["g_idx"]))
                gptq.check_g_idx(tensors["g_idx"], g_idx, infos["scales"].shape[0])
                g_idx = gptq.act_order(g_idx, block)
        else:
            zeros = awq.awq_zero_points(qzeros, self.format)
            block, g_idx = self.format.group_size, None
        return PackedLinear(prefix, out_features, in_features, tensors, self.format.bits, block,
                            is_midpoint(zeros, self.format.bits), g_idx)

    def __contains__(self, name: str) -> bool:
        return name in self._linears or (name in self._inner and name not in self._packed)

    def names(self) -> list[str]:
        return [*self._linears, *(n for n in self._inner.names() if n not in self._packed)]

    def info(self, name: str) -> TensorInfo:
        linear = self._linears.get(name)
        if linear is None:
            return self._inner.info(name)
        qweight = self._inner.info(linear.tensors["qweight"])
        return TensorInfo(name, qweight.path, np.dtype(np.float32),
                          (linear.out_features, linear.in_features), qweight.begin, qweight.end)

    def packed(self, name: str) -> PackedLinear | None:
        """The packed Linear whose float name is ``name`` (``<prefix>.weight``), if any."""
        return self._linears.get(name)

    def quantized(self, name: str) -> QuantizedWeight:
        """The integers of the packed Linear whose float name is ``name``."""
        linear = self._linears[name]
        unpack = gptq.unpack_gptq if self._gptq else awq.unpack_awq
        return unpack({s: self._inner.read(n) for s, n in linear.tensors.items()}, self.format)

    def is_stored_as_read(self, name: str) -> bool:
        """A packed Linear's float weight is computed; every other tensor is stored."""
        return name not in self._linears

    def read(self, name: str) -> np.ndarray:
        """Float [out, in] for a packed Linear (dequantized), else the stored tensor."""
        if name in self._linears:
            return self.quantized(name).dequantize()
        return self._inner.read(name)


def open_checkpoint(folder: str, raw: dict
                    ) -> SafetensorsCheckpoint | PrequantizedCheckpoint | DequantizedCheckpoint:
    """The checkpoint as config.json declares it: float, GPTQ / AWQ packed, or FP8 /
    MXFP4 codes seen as the float weights they encode.

    Any other ``quantization_config`` is refused (ConfigError naming its method)
    before the weight files are read; quantized tensors without one are refused
    by name and dtype."""
    fmt = read_quantization_config(raw)
    checkpoint = SafetensorsCheckpoint(folder)
    if fmt is not None and fmt.method == FP8:
        return open_fp8(checkpoint, fmt)
    if fmt is not None and fmt.method == MXFP4:
        return open_mxfp4(checkpoint, fmt)
    if fmt is not None:
        return PrequantizedCheckpoint(checkpoint, fmt)
    _refuse_unlabelled(checkpoint)
    return checkpoint


def _refuse_unlabelled(checkpoint: SafetensorsCheckpoint) -> None:
    """Quantized tensors in a checkpoint whose config.json does not say how to read them."""
    for name in checkpoint.names():
        info = checkpoint.info(name)
        if info.dtype in FP8_DTYPES:
            raise WeightsError(
                f"{os.path.basename(info.path)}: tensor {name} has dtype "
                f"{dtype_name(info.dtype)} (FP8) and config.json has no quantization_config; "
                f"FP8 weights need their block scales (quant_method fp8)")
    packed = next((n for n in checkpoint.names() if n.endswith(".qweight")), None)
    if packed is not None:  # e.g. an old AutoGPTQ folder with a separate quantize_config.json
        raise WeightsError(f"checkpoint has packed tensors (e.g. {packed!r}) but config.json has "
                           f"no quantization_config saying how they are packed")
    blocks = next((n for n in checkpoint.names()
                   if n.endswith(BLOCKS) and checkpoint.info(n).dtype == np.uint8), None)
    if blocks is not None:
        raise WeightsError(f"checkpoint has MXFP4 blocks (e.g. {blocks!r}) but config.json has "
                           f"no quantization_config (quant_method mxfp4)")


#: key of an initializer tensor's ``meta`` that holds its PrequantizedSource
PREQUANTIZED = "mobius.prequantized"


def source_for(checkpoint: PrequantizedCheckpoint, linear: PackedLinear,
               transform) -> PrequantizedSource:
    """The source of a graph weight bound to ``linear`` through ``transform`` (the
    parameter's [out, in] -> [in, out] layout function, e.g. a fused projection's
    row slice). Applied to a one-column stand-in, ``transform`` says which rows it takes."""
    stand_in = np.arange(linear.out_features)[:, None]
    taken = None if transform is None else np.asarray(transform(stand_in))
    if taken is None or taken.ndim != 2 or taken.shape[0] != 1:
        raise WeightsError(f"packed weight '{linear.prefix}.qweight' is bound to a parameter "
                           f"that is not a Linear [out, in] weight; it cannot be read packed")
    rows = taken[0]
    full = np.array_equal(rows, np.arange(linear.out_features))
    return PrequantizedSource(checkpoint, linear, None if full else rows)
