"""Linear projection, stored as a MatMul weight [in, out] (+ optional bias)."""

from __future__ import annotations

import dataclasses

from onnxscript import nn

from mobius.components.weight import Weight, transpose


@dataclasses.dataclass(frozen=True)
class FusedRows:
    """Rows [start, stop) of a fused checkpoint tensor (e.g. Phi-3's qkv_proj).

    ``prefix`` is the fused module's checkpoint name without ``.weight``/``.bias``;
    ``total`` its number of rows (output features).
    """

    prefix: str
    start: int
    stop: int
    total: int


class Linear(nn.Module):
    """y = x @ W^T + b, with W kept pre-transposed so no Transpose runs at inference."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False,
                 checkpoint_name: str | None = None, fused: FusedRows | None = None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        if fused is not None:
            rows = slice(fused.start, fused.stop)
            self.weight = Weight([in_features, out_features],
                                 checkpoint_shape=[fused.total, in_features],
                                 transform=lambda a: transpose(a[rows]),
                                 checkpoint_name=f"{fused.prefix}.weight")
            self.bias = Weight([out_features], checkpoint_shape=[fused.total],
                               transform=lambda a: a[rows],
                               checkpoint_name=f"{fused.prefix}.bias") if bias else None
            return
        self.weight = Weight(
            [in_features, out_features],
            checkpoint_shape=[out_features, in_features],
            transform=transpose,
            checkpoint_name=checkpoint_name,
        )
        self.bias = Weight([out_features]) if bias else None

    def forward(self, op, x):
        y = op.MatMul(x, self.weight)
        if self.bias is not None:
            y = op.Add(y, self.bias)
        return y


def split_fused(in_features: int, sizes: list[int], prefix: str, bias: bool = False) -> list[Linear]:
    """Linears reading consecutive row blocks of one fused checkpoint projection."""
    total = sum(sizes)
    out, start = [], 0
    for size in sizes:
        out.append(Linear(in_features, size, bias, fused=FusedRows(prefix, start, start + size, total)))
        start += size
    return out
