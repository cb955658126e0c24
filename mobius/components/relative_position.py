"""T5's relative position bias: a learned [num_buckets, heads] table, indexed by the
bucket of each (query, key) distance and added to the attention scores.

The bucket of a distance ``key - query`` is T5's: bidirectional (encoder) halves
the buckets between earlier and later keys, causal (decoder) puts every later key
in bucket 0; the first half of the remaining buckets are exact distances, the rest
grow logarithmically up to ``max_distance``, beyond which all distances share the
last bucket. Because every distance past ``max_distance`` has the same bucket, the
bucket function is a table over the clipped distance -max_distance .. max_distance,
built once here in float32 the way transformers computes it; the graph computes the
distances from the run-time lengths, clips them and looks their buckets up. That
keeps the logarithm out of the graph, so every EP and dtype gets the same integers.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.weight import Weight


def bucket_table(num_buckets: int, max_distance: int, bidirectional: bool) -> np.ndarray:
    """int64 buckets of the distances -max_distance .. max_distance (key - query)."""
    distance = np.arange(-max_distance, max_distance + 1, dtype=np.int64)
    buckets = np.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        buckets += (distance > 0) * num_buckets
        n = np.abs(distance)
    else:
        n = -np.minimum(distance, 0)
    max_exact = num_buckets // 2
    scaled = np.log(np.maximum(n, 1).astype(np.float32) / np.float32(max_exact))
    scaled = scaled / np.float32(math.log(max_distance / max_exact))
    large = max_exact + (scaled * np.float32(num_buckets - max_exact)).astype(np.int64)
    large = np.minimum(large, num_buckets - 1)
    return buckets + np.where(n < max_exact, n, large)


class RelativePositionBias(nn.Module):
    """``weight`` [num_buckets, heads]; forward -> the additive bias [1, heads, q, k]."""

    def __init__(self, num_buckets: int, num_heads: int, max_distance: int, bidirectional: bool):
        super().__init__()
        self.max_distance = max_distance
        self.table = bucket_table(num_buckets, max_distance, bidirectional)
        self.weight = Weight([num_buckets, num_heads])

    def forward(self, op, query_positions, key_positions):
        """``query_positions`` [q], ``key_positions`` [k]: int64 token positions."""
        distance = op.Sub(op.Unsqueeze(key_positions, op.Constant(value_ints=[0])),
                          op.Unsqueeze(query_positions, op.Constant(value_ints=[1])))  # [q, k]
        limit = self.max_distance
        index = op.Add(op.Clip(distance, op.Constant(value=ir.tensor(np.array(-limit, np.int64))),
                               op.Constant(value=ir.tensor(np.array(limit, np.int64)))),
                       op.Constant(value=ir.tensor(np.array(limit, np.int64))))
        buckets = op.Gather(op.Constant(value=ir.tensor(self.table)), index, axis=0)
        bias = op.Gather(self.weight, buckets, axis=0)  # [q, k, heads]
        return op.Unsqueeze(op.Transpose(bias, perm=[2, 0, 1]), op.Constant(value_ints=[0]))
