"""A GGUF file seen as the Hugging Face checkpoint it was converted from.

Tensors are named back to the HF names the families read (gguf_names.py);
llama.cpp's row permutation of Llama q/k projections (its RoPE layout) is
undone, and the one it adds to Gemma's RMSNorm scales is taken off. F32 /
F16 / BF16 tensors are read as stored (copied file to file where nothing
changes them); quantized ones are dequantized by gguf's own ``dequantize``
when read, a band of rows at a time where a reader asks. A Q4_0 / Q8_0
Linear of a decoder block whose bits the build asked for is also offered as
its integers (``packed`` / ``quantized``: PrequantizedCheckpoint's
interface), so the quantization pass emits them into MatMulNBits without
requantizing: Q4_0 is (code - 8) times an f16 scale per block of 32, Q8_0
int8 codes (+128 as uint8, zero point 128) times an f16 scale. The token
embedding and LM head are read as floats (the quantization pass quantizes
them itself). Any other type is refused by name when the file is opened,
before any graph is built.
"""

from __future__ import annotations

import dataclasses
import os

import gguf
import ml_dtypes
import numpy as np

from mobius.errors import WeightsError
from mobius.quantize.quantized_weight import QuantizedWeight
from mobius.weights.gguf_names import hf_name
from mobius.weights.prequantized_checkpoint import PackedLinear
from mobius.weights.safetensors_checkpoint import TensorInfo

FLOATS = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
          "BF16": np.dtype(ml_dtypes.bfloat16)}
DEQUANTIZED = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")
#: types whose integers MatMulNBits takes as they are: their bits
CARRIED_BITS = {"Q4_0": 4, "Q8_0": 8}
_BLOCK = 32  # elements per Q4_0 / Q8_0 block
#: architectures whose q/k rows llama.cpp permutes, and the config key of each one's heads
_PERMUTED = {"llama": {"self_attn.q_proj": "num_attention_heads",
                       "self_attn.k_proj": "num_key_value_heads"}}
#: architectures whose RMSNorm scales llama.cpp stores plus one (Gemma computes x * (1 + w))
_NORM_PLUS_ONE = ("gemma", "gemma2", "gemma3")


@dataclasses.dataclass(frozen=True)
class GgufTensor:
    """One tensor of the file: HF-order shape, byte range, the heads its rows are
    permuted in (None: stored in HF row order) and whether it is stored plus one."""

    gguf_name: str
    qtype: str
    shape: tuple[int, ...]
    begin: int
    end: int
    heads: int | None
    plus_one: bool = False


class GgufCheckpoint:
    """Duck-types SafetensorsCheckpoint (names / info / read) and, for the Q4_0 / Q8_0
    Linears the build quantizes to their bits, PrequantizedCheckpoint (packed / quantized)."""

    def __init__(self, path: str, reader: gguf.GGUFReader, arch: str, raw: dict,
                 bits_for=None):
        """``bits_for(name)``: the bits the build quantizes HF weight ``name`` to (None:
        float); a Q4_0 / Q8_0 Linear of those bits keeps its integers."""
        self.path = os.path.abspath(path)
        self.folder = os.path.dirname(self.path)
        self._tensors: dict[str, GgufTensor] = {}
        for t in reader.tensors:
            qtype = t.tensor_type.name
            if qtype not in FLOATS and qtype not in DEQUANTIZED:
                raise WeightsError(
                    f"GGUF tensor {t.name} has type {qtype}, which mobius does not read; "
                    f"supported: {', '.join([*FLOATS, *DEQUANTIZED])}")
            name = hf_name(arch, t.name)
            begin = int(t.data_offset)
            self._tensors[name] = GgufTensor(
                t.name, qtype, tuple(int(d) for d in t.shape[::-1]), begin,
                begin + int(t.n_bytes), _heads(arch, name, raw),
                arch in _NORM_PLUS_ONE and t.name.endswith("norm.weight"))
        self._packed = {name: self._linear(name) for name, t in self._tensors.items()
                        if t.qtype in CARRIED_BITS and t.gguf_name.startswith("blk.")
                        and len(t.shape) == 2 and bits_for
                        and bits_for(name) == CARRIED_BITS[t.qtype]}

    def _linear(self, name: str) -> PackedLinear:
        t = self._tensors[name]
        return PackedLinear(name.rsplit(".", 1)[0], t.shape[0], t.shape[1],
                            {"gguf": t.gguf_name}, CARRIED_BITS[t.qtype], _BLOCK, True, None)

    def __contains__(self, name: str) -> bool:
        return name in self._tensors

    def names(self) -> list[str]:
        return list(self._tensors)

    def tensor(self, name: str) -> GgufTensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise WeightsError(f"GGUF file has no tensor standing for {name!r}") from None

    def info(self, name: str) -> TensorInfo:
        t = self.tensor(name)
        return TensorInfo(name, self.path, FLOATS.get(t.qtype, np.dtype(np.float32)), t.shape,
                          t.begin, t.end)

    def is_stored_as_read(self, name: str) -> bool:
        """A float tensor in HF row order is read as its bytes; others are computed."""
        t = self.tensor(name)
        return t.qtype in FLOATS and t.heads is None and not t.plus_one

    def read(self, name: str) -> np.ndarray:
        """The tensor in HF layout: as stored (float), else dequantized to float32."""
        t = self.tensor(name)
        array = self._rows(t, 0, t.shape[0])
        return array if t.heads is None else array[_hf_row_order(t.shape[0], t.heads)]

    def read_rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) alone (all rows are read for a permuted tensor)."""
        t = self.tensor(name)
        if t.heads is not None:
            return self.read(name)[start:stop]
        return self._rows(t, start, stop)

    def _rows(self, t: GgufTensor, start: int, stop: int) -> np.ndarray:
        raw = self._raw(t)[start:stop]
        if t.qtype not in FLOATS:
            raw = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[t.qtype])
        return raw.astype(np.float32) - 1 if t.plus_one else raw

    def _raw(self, t: GgufTensor) -> np.ndarray:
        """The stored rows: float [rows, ...], or the quantized bytes [rows, bytes per row]."""
        rows = t.shape[0]
        if t.qtype in FLOATS:
            dtype, shape = FLOATS[t.qtype], t.shape
        else:
            dtype, shape = np.dtype(np.uint8), (rows, (t.end - t.begin) // max(rows, 1))
        try:
            return np.memmap(self.path, dtype=dtype, mode="r", offset=t.begin, shape=shape)
        except (OSError, ValueError) as e:
            raise WeightsError(f"cannot read GGUF tensor {t.gguf_name} from "
                               f"{os.path.basename(self.path)} ({e})") from e

    def packed(self, name: str) -> PackedLinear | None:
        """The Q4_0 / Q8_0 Linear ``name`` as integers the build keeps, if it is one."""
        return self._packed.get(name)

    def quantized(self, name: str) -> QuantizedWeight:
        """The integers of Q4_0 / Q8_0 tensor ``name``, rows in HF order."""
        t = self.tensor(name)
        codes, scales = _codes_and_scales(self._raw(t), t.qtype, t.shape[1])
        if t.heads is not None:
            order = _hf_row_order(t.shape[0], t.heads)
            codes, scales = codes[order], scales[order]
        return QuantizedWeight(np.ascontiguousarray(codes), np.ascontiguousarray(scales), None,
                               CARRIED_BITS[t.qtype], _BLOCK)


def _codes_and_scales(raw: np.ndarray, qtype: str, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 codes [rows, cols] (zero point 2**(bits-1)) and float32 scales [rows, blocks].

    A block is an f16 scale then its codes: Q4_0 packs element j in the low nibble
    and element j + 16 in the high nibble of byte j; Q8_0 stores int8 codes."""
    rows = raw.shape[0]
    blocks = raw.reshape(rows, cols // _BLOCK, -1)
    scales = np.ascontiguousarray(blocks[..., :2]).view(np.float16)[..., 0].astype(np.float32)
    body = blocks[..., 2:]
    if qtype == "Q4_0":
        codes = np.concatenate([body & 0x0F, body >> 4], axis=-1)
    else:
        codes = body ^ np.uint8(0x80)  # int8 q -> uint8 q + 128
    return codes.reshape(rows, cols), scales


def _heads(arch: str, name: str, raw: dict) -> int | None:
    module, _, _ = name.rpartition(".")
    key = _PERMUTED.get(arch, {}).get(module.split(".", 3)[-1])
    return None if key is None else int(raw.get(key) or raw["num_attention_heads"])


def _hf_row_order(rows: int, heads: int) -> np.ndarray:
    """Indices that take llama.cpp's permuted rows back to HF order.

    llama.cpp interleaves each head's two rotary halves (row r of the first half
    and row r of the second half become rows 2r and 2r+1); HF row h*d + i*half + r
    is stored at h*d + 2r + i."""
    if rows % (2 * heads):
        raise WeightsError(f"a permuted q/k projection has {rows} rows, not a multiple of "
                           f"2 x {heads} heads")
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(-1)
