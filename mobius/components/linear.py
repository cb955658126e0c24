"""Linear projection, stored as a MatMul weight [in, out] (+ optional bias)."""

from __future__ import annotations

import dataclasses

import numpy as np
from onnxscript import nn

from mobius.components.weight import Weight, transpose


@dataclasses.dataclass(frozen=True)
class FusedRows:
    """Output features [start, stop) of a fused checkpoint projection
    (Phi-3's qkv_proj, GPT-2's c_attn).

    ``prefix`` is the fused module's checkpoint name without ``.weight``/``.bias``;
    ``total`` its number of output features.
    """

    prefix: str
    start: int
    stop: int
    total: int
    #: explicit output rows, for fused layouts that interleave the parts (Falcon's
    #: query_key_value: per head or per KV group); start/stop are then ignored
    rows: tuple[int, ...] | None = None


class Linear(nn.Module):
    """y = x @ W^T + b, with W kept pre-transposed so no Transpose runs at inference."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 checkpoint_name: str | None = None, fused: FusedRows | None = None,
                 conv1d: bool = False, prefix: str | None = None):
        """checkpoint_name: the weight's source tensor (e.g. tied embeddings);
        prefix: source name of weight and bias without the suffix;
        fused: read a slice of a fused projection;
        conv1d: the checkpoint stores [in, out] (GPT-2's Conv1D) instead of [out, in]."""
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        # a contiguous part of a fused [out, in] projection is a row range (checkpoint_rows)
        row_range = None
        if fused is not None:
            prefix = fused.prefix
            cols = slice(fused.start, fused.stop) if fused.rows is None else np.array(fused.rows)
            total = fused.total
            if fused.rows is None and not conv1d:
                row_range = (fused.start, fused.stop)
        else:
            cols, total = slice(None), out_features
        if conv1d:
            weight_shape = [in_features, total]
            weight_transform = (lambda a: np.ascontiguousarray(a[:, cols])) if fused else None
        else:
            weight_shape = [total, in_features]
            weight_transform = (transpose if fused is None or row_range
                                else lambda a: transpose(a[cols]))
        if prefix is not None:
            checkpoint_name = f"{prefix}.weight"
        self.weight = Weight([in_features, out_features], checkpoint_shape=weight_shape,
                             transform=weight_transform, checkpoint_name=checkpoint_name,
                             checkpoint_rows=row_range)
        self.bias = None
        if bias:
            picked = fused is not None and row_range is None
            self.bias = Weight([out_features], checkpoint_shape=[total],
                               transform=(lambda a: a[cols]) if picked else None,
                               checkpoint_name=f"{prefix}.bias" if prefix else None,
                               checkpoint_rows=row_range)

    def forward(self, op, x):
        y = op.MatMul(x, self.weight)
        if self.bias is not None:
            y = op.Add(y, self.bias)
        return y


def split_fused(in_features: int, sizes: list[int], prefix: str, bias: bool = False,
                conv1d: bool = False) -> list[Linear]:
    """Linears reading consecutive output blocks of one fused checkpoint projection."""
    total = sum(sizes)
    out, start = [], 0
    for size in sizes:
        out.append(Linear(in_features, size, bias, fused=FusedRows(prefix, start, start + size, total),
                          conv1d=conv1d))
        start += size
    return out
