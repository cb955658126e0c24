"""Multimodal rotary position embedding (Qwen2-VL / Qwen2.5-VL M-RoPE).

position_ids carry three streams [3, batch, seq] (temporal, height, width;
all three equal on text tokens). The rotary frequencies are split into
consecutive sections (``mrope_section``, summing to rotary_dim/2): section k
rotates by position stream k % 3. Qwen3-VL interleaves them instead
(``interleaved``): frequency j reads stream j % 3 while j < 3 * section[j % 3],
the temporal stream after that. The result is ordinary cos/sin
[batch, seq, rotary_dim/2], so attention applies it like any RoPE.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mobius.components.rotary import RotaryEmbedding
from mobius.components.weight import constant
from mobius.config.rope import RopeConfig
from mobius.context import get_build_dtype
from mobius.errors import ConfigError
from mobius.weights.dtypes import numpy_dtype

#: number of position streams (temporal, height, width)
STREAMS = 3


def stream_of_frequency(section: Sequence[int], half: int) -> np.ndarray:
    """[half] int: the position stream each rotary frequency reads."""
    if not section or any(int(s) <= 0 for s in section) or sum(section) != half:
        raise ConfigError(f"config.json: mrope_section {list(section)} must be positive sizes "
                          f"summing to rotary_dim / 2 = {half}")
    return np.concatenate([np.full(int(size), k % STREAMS, dtype=np.int64)
                           for k, size in enumerate(section)])


def stream_of_interleaved_frequency(section: Sequence[int], half: int) -> np.ndarray:
    """[half] int: the stream each frequency reads in the interleaved layout."""
    stream_of_frequency(section, half)  # the same bounds
    index = np.arange(half)
    streams = index % STREAMS
    limits = np.array([half] + [STREAMS * int(s) for s in section[1:STREAMS]], dtype=np.int64)
    return np.where(index < limits[streams], streams, 0)


class MRotaryEmbedding(RotaryEmbedding):
    """position_ids [3, batch, seq] -> (cos, sin), each [batch, seq, rotary_dim/2]."""

    def __init__(self, rope: RopeConfig, section: Sequence[int], interleaved: bool = False):
        if rope.is_dynamic:
            raise ConfigError(f"config.json: M-RoPE with rope type {rope.rope_type!r} "
                              f"is not supported")
        super().__init__(rope)
        layout = stream_of_interleaved_frequency if interleaved else stream_of_frequency
        streams = layout(section, rope.rotary_dim // 2)
        onehot = (np.arange(STREAMS)[:, None] == streams[None, :])  # [3, half]
        dtype = numpy_dtype(get_build_dtype())
        self.stream_select = constant(onehot.astype(dtype)[:, None, None, :], "mrope_select")

    def forward(self, op, position_ids):
        # Gather per stream [3, batch, seq, half], keep each frequency's stream: the
        # one-hot product adds exact zeros, so the sum is the selected value itself.
        cos = op.Gather(self.cos_cache, position_ids, axis=0)
        sin = op.Gather(self.sin_cache, position_ids, axis=0)
        axis = op.Constant(value_ints=[0])
        return (op.ReduceSum(op.Mul(cos, self.stream_select), axis, keepdims=0),
                op.ReduceSum(op.Mul(sin, self.stream_select), axis, keepdims=0))

