"""A GPTQ / AWQ checkpoint seen as the float checkpoint it stands for, plus its integers.

Each packed Linear ``<prefix>.qweight/.qzeros/.scales[/.g_idx]`` appears as
one float tensor ``<prefix>.weight`` [out, in] (dequantized when read), so
models bind to it exactly as to a float checkpoint; the quantization pass asks
:meth:`PrequantizedCheckpoint.quantized` for the integers themselves and emits
them without requantizing. Every packed shape, dtype and group index is
checked when the checkpoint is opened, before any graph is built.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mobius.errors import WeightsError
from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.weights import awq, gptq
from mobius.weights.quantization_config import GPTQ, PrequantizedFormat, read_quantization_config
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint, TensorInfo

_READERS = {
    GPTQ: (gptq.REQUIRED, gptq.OPTIONAL, gptq.gptq_features, gptq.unpack_gptq),
    "awq": (awq.REQUIRED, awq.OPTIONAL, awq.awq_features, awq.unpack_awq),
}
#: suffixes whose presence marks a packed Linear (scales alone is too common a name)
_MARKERS = ("qweight", "qzeros")


@dataclasses.dataclass(frozen=True)
class PackedLinear:
    prefix: str
    out_features: int
    in_features: int
    tensors: dict[str, str]  # suffix -> checkpoint tensor name


class PrequantizedCheckpoint:
    """Duck-types :class:`SafetensorsCheckpoint` (names / info / read) over the packed one."""

    def __init__(self, checkpoint: SafetensorsCheckpoint, fmt: PrequantizedFormat):
        self.folder = checkpoint.folder
        self.format = fmt
        self._inner = checkpoint
        self._linears: dict[str, PackedLinear] = {}
        prefixes = sorted({n.rsplit(".", 1)[0] for n in checkpoint.names()
                           if n.rsplit(".", 1)[-1] in _MARKERS})
        if not prefixes:
            raise WeightsError(f"config.json declares {fmt.method.upper()} quantization but the "
                               f"checkpoint has no packed Linear (no *.qweight tensor)")
        for prefix in prefixes:
            self._linears[f"{prefix}.weight"] = self._describe(prefix)
        self._packed = {name for linear in self._linears.values()
                        for name in linear.tensors.values()}

    def _describe(self, prefix: str) -> PackedLinear:
        required, optional, features, _ = _READERS[self.format.method]
        for suffix in required:
            if f"{prefix}.{suffix}" not in self._inner:
                raise WeightsError(
                    f"checkpoint is missing tensor {prefix}.{suffix!s} "
                    f"(a {self.format.method.upper()} Linear needs {', '.join(required)})")
        tensors = {s: f"{prefix}.{s}" for s in (*required, *optional)
                   if f"{prefix}.{s}" in self._inner}
        infos = {s: self._inner.info(n) for s, n in tensors.items()}
        out_features, in_features = features(
            prefix, {s: i.shape for s, i in infos.items()},
            {s: i.dtype for s, i in infos.items()}, self.format)
        if "g_idx" in tensors:
            groups = infos["scales"].shape[0]
            gptq.check_g_idx(tensors["g_idx"], np.asarray(self._inner.read(tensors["g_idx"])),
                             groups)
        return PackedLinear(prefix, out_features, in_features, tensors)

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

    def is_quantized(self, name: str) -> bool:
        return name in self._linears

    def quantized(self, name: str) -> QuantizedWeight:
        """The integers of the packed Linear whose float name is ``name`` (``<prefix>.weight``)."""
        linear = self._linears[name]
        unpack = _READERS[self.format.method][3]
        return unpack({s: self._inner.read(n) for s, n in linear.tensors.items()}, self.format)

    def read(self, name: str) -> np.ndarray:
        """Float [out, in] for a packed Linear (dequantized), else the stored tensor."""
        if name in self._linears:
            return self.quantized(name).dequantize()
        return self._inner.read(name)


def open_checkpoint(folder: str, raw: dict) -> SafetensorsCheckpoint | PrequantizedCheckpoint:
    """The checkpoint as config.json declares it: float, or GPTQ / AWQ packed.

    Any other ``quantization_config`` is refused (ConfigError naming its method)
    before the weight files are read."""
    fmt = read_quantization_config(raw)
    checkpoint = SafetensorsCheckpoint(folder)
    return checkpoint if fmt is None else PrequantizedCheckpoint(checkpoint, fmt)
