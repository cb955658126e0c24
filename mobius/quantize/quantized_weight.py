"""QuantizedWeight: one Linear's block-quantized weight, whatever produced it.

RTN quantization of a float checkpoint and the GPTQ / AWQ readers all produce
this one form; graph emission and packing (MatMulNBits blobs, blocked
DequantizeLinear) read only it, so each producer meets every EP form.
Layout is the checkpoint's: N = out_features rows, K = in_features columns,
blocks run along K.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mobius.errors import WeightsError

BITS = (4, 8)


@dataclasses.dataclass(frozen=True)
class QuantizedWeight:
    """weight[n, k] = (codes[n, k] - zero_point[n, b]) * scales[n, b], b = block of k.

    Attributes:
        codes: uint8 [N, K], unpacked integers in [0, 2**bits).
        scales: float32 [N, ceil(K / block_size)]; may be negative (RTN mirrors
            the symmetric grid so a block's larger side gets its extra step).
        zero_points: uint8 [N, ceil(K / block_size)] in [0, 2**bits), or None
            (symmetric: the implicit zero point 2**(bits - 1)).
        bits: 4 or 8.
        block_size: elements of K per scale.
        g_idx: int32 [K], block index of each input channel (GPTQ act-order);
            None when channel k is in block k // block_size.
    """

    codes: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    bits: int
    block_size: int
    g_idx: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.bits not in BITS:
            raise WeightsError(f"unsupported quantization bits {self.bits}; expected 4 or 8")
        if self.block_size < 1:
            raise WeightsError(f"block size must be positive, got {self.block_size}")
        if self.codes.dtype != np.uint8 or self.codes.ndim != 2:
            raise WeightsError(f"codes must be uint8 [N, K], got {self.codes.dtype} "
                               f"{list(self.codes.shape)}")
        blocks = (self.out_features, self.num_blocks)
        if self.scales.shape != blocks:
            raise WeightsError(f"scales have shape {list(self.scales.shape)}, "
                               f"expected {list(blocks)}")
        if self.zero_points is not None and self.zero_points.shape != blocks:
            raise WeightsError(f"zero points have shape {list(self.zero_points.shape)}, "
                               f"expected {list(blocks)}")
        if self.g_idx is not None and self.g_idx.shape != (self.in_features,):
            raise WeightsError(f"g_idx has shape {list(self.g_idx.shape)}, "
                               f"expected [{self.in_features}]")

    @property
    def out_features(self) -> int:
        return self.codes.shape[0]

    @property
    def in_features(self) -> int:
        return self.codes.shape[1]

    @property
    def num_blocks(self) -> int:
        return -(-self.in_features // self.block_size)

    def block_of_channel(self) -> np.ndarray:
        """int [K]: the scale/zero-point column each input channel uses."""
        if self.g_idx is not None:
            return self.g_idx.astype(np.int64)
        return np.arange(self.in_features) // self.block_size

    def zero_point_array(self) -> np.ndarray:
        """uint8 [N, blocks]: explicit zero points (the implicit ones when symmetric)."""
        if self.zero_points is not None:
            return self.zero_points
        return np.full(self.scales.shape, 1 << (self.bits - 1), dtype=np.uint8)

    def dequantize(self) -> np.ndarray:
        """float32 [N, K]: the numpy reference every graph form must reproduce."""
        blocks = self.block_of_channel()
        zero = self.zero_point_array().astype(np.float32)[:, blocks]
        return (self.codes.astype(np.float32) - zero) * self.scales.astype(np.float32)[:, blocks]
