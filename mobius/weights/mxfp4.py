"""MXFP4 expert weights (``quant_method: mxfp4``, the released gpt-oss checkpoints),
dequantized expert by expert when read.

Layout (as transformers' gpt-oss MXFP4 loader reads it): for a stacked float
tensor ``X`` [E, K, R] (gpt-oss ``mlp.experts.gate_up_proj`` [E, H, 2I],
``down_proj`` [E, I, H]) the checkpoint stores ``X_blocks`` U8
[E, R, K / 32, 16] and ``X_scales`` U8 [E, R, K / 32]: each row of R holds
its K inputs in blocks of 32 FP4 (E2M1) values, two per byte with the lower
nibble first, and one E8M0 exponent per block. value = E2M1(nibble) *
2**(scale - 127), exact in float32; the float tensor is that [E, R, K] array
with its last two axes swapped. Every other tensor (attention, router,
biases, norms: ``modules_to_not_convert``) is stored float and read as is.
"""

from __future__ import annotations

import numpy as np

from mobius.errors import WeightsError
from mobius.weights.dequantized_checkpoint import Dequantized, DequantizedCheckpoint
from mobius.weights.packed_bits import check_dtype, check_shape
from mobius.weights.quantization_config import Mxfp4Format
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint

BLOCKS, SCALES = "_blocks", "_scales"
_BLOCK = 32  # FP4 values sharing one exponent
#: E2M1 by its 4-bit code: sign bit 3, exponent bits 2-1, mantissa bit 0
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)


def open_mxfp4(checkpoint: SafetensorsCheckpoint, fmt: Mxfp4Format) -> DequantizedCheckpoint:
    """The checkpoint with every ``X_blocks`` / ``X_scales`` pair seen as float32 ``X``;
    shapes and dtypes checked here, before any data is read."""
    blocks = [n for n in checkpoint.names()
              if n.endswith(BLOCKS) and checkpoint.info(n).dtype == np.uint8]
    if not blocks:
        raise WeightsError("config.json declares MXFP4 quantization but the checkpoint has no "
                           "MXFP4 tensor (no *_blocks)")
    tensors = [_tensor(checkpoint, name[:-len(BLOCKS)]) for name in blocks]
    hidden = [n for t in tensors for n in (t.codes, t.name + SCALES)]
    return DequantizedCheckpoint(checkpoint, fmt, tensors, hidden)


def _tensor(checkpoint: SafetensorsCheckpoint, name: str) -> Dequantized:
    blocks_name, scales_name = name + BLOCKS, name + SCALES
    if scales_name not in checkpoint:
        raise WeightsError(f"checkpoint has {blocks_name!r} but not {scales_name!r} "
                           f"(an MXFP4 tensor needs both)")
    blocks, scales = checkpoint.info(blocks_name), checkpoint.info(scales_name)
    check_dtype(scales_name, scales.dtype, (np.uint8,))
    if len(blocks.shape) != 4 or blocks.shape[-1] != _BLOCK // 2:
        raise WeightsError(f"tensor {blocks_name!r} has shape {list(blocks.shape)}; MXFP4 "
                           f"expert blocks are [experts, rows, blocks, {_BLOCK // 2}]")
    check_shape(scales_name, scales.shape, blocks.shape[:-1],
                f"{blocks_name} {list(blocks.shape)}")
    experts, rows, groups, _ = blocks.shape

    def read(start: int, stop: int) -> np.ndarray:
        return dequantize_experts(checkpoint.read(blocks_name)[start:stop],
                                  checkpoint.read(scales_name)[start:stop])

    return Dequantized(name, (experts, groups * _BLOCK, rows), blocks_name, read)


def dequantize_experts(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 [e, K, R] from blocks U8 [e, R, K / 32, 16] and E8M0 scales U8 [e, R, K / 32],
    one expert at a time (the temporaries stay one expert's size)."""
    experts, rows, groups, half = blocks.shape
    out = np.empty((experts, groups * 2 * half, rows), np.float32)
    for e in range(experts):
        packed = np.asarray(blocks[e])
        values = np.empty((rows, groups, 2 * half), np.float32)
        values[..., 0::2] = E2M1[packed & 0x0F]
        values[..., 1::2] = E2M1[packed >> 4]
        exponents = np.asarray(scales[e]).astype(np.int32) - 127
        values = np.ldexp(values, exponents[..., None])
        out[e] = values.reshape(rows, -1).T
    return out
