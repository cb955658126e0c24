"""Sentence-embedding pooling over encoder hidden states (sentence-transformers' Pooling
and Normalize modules), computed in float32.

Modes, concatenated in the order given: ``cls`` (the first real token), ``max`` and
``mean`` (over real tokens), ``mean_sqrt_len_tokens`` (the sum over real tokens /
sqrt(count)), ``lasttoken`` (the last real token). Right or left padding alike.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.errors import UnsupportedModelError

MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "lasttoken")
_FLOAT = ir.DataType.FLOAT


def pool(op, hidden, attention_mask, modes: tuple[str, ...], normalize: bool, dtype: ir.DataType):
    """hidden [batch, seq, hidden], attention_mask int64 [batch, seq] -> [batch, hidden * len(modes)]."""
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise UnsupportedModelError(f"sentence pooling modes {list(modes)}: supported are "
                                    f"{', '.join(MODES)}")
    x = op.Cast(hidden, to=_FLOAT)
    mask = op.Unsqueeze(op.Cast(attention_mask, to=_FLOAT), op.Constant(value_ints=[-1]))
    pooled = [_POOLS[mode](op, x, mask, attention_mask) for mode in modes]
    out = pooled[0] if len(pooled) == 1 else op.Concat(*pooled, axis=-1)
    if normalize:  # x / max(||x||, 1e-12), torch.nn.functional.normalize
        norm = op.ReduceL2(out, op.Constant(value_ints=[-1]), keepdims=1)
        out = op.Div(out, op.Max(norm, op.Constant(value_float=1e-12)))
    return out if dtype == _FLOAT else op.Cast(out, to=dtype)


def _cls(op, x, mask, attention_mask):
    first = op.ArgMax(attention_mask, axis=1, keepdims=1)  # the first real token
    return _gather_token(op, x, first)


def _sums(op, x, mask):
    axis = op.Constant(value_ints=[1])
    total = op.ReduceSum(op.Mul(x, mask), axis, keepdims=0)
    count = op.Max(op.ReduceSum(mask, axis, keepdims=0), op.Constant(value_float=1e-9))
    return total, count


def _mean(op, x, mask, attention_mask):
    total, count = _sums(op, x, mask)
    return op.Div(total, count)


def _mean_sqrt_len(op, x, mask, attention_mask):
    total, count = _sums(op, x, mask)
    return op.Div(total, op.Sqrt(count))


def _max(op, x, mask, attention_mask):
    # padding set to -1e9 (sentence-transformers' value) so it never wins
    padded = op.Mul(op.Sub(op.Constant(value_float=1.0), mask), op.Constant(value_float=-1e9))
    return op.ReduceMax(op.Add(op.Mul(x, mask), padded), op.Constant(value_ints=[1]), keepdims=0)


def _last_token(op, x, mask, attention_mask):
    # index of the last real token: max over positions * mask
    ones = op.Add(op.Mul(attention_mask, op.Constant(value_int=0)), op.Constant(value_int=1))
    positions = op.Sub(op.CumSum(ones, op.Constant(value_int=1)), op.Constant(value_int=1))
    last = op.ReduceMax(op.Mul(positions, attention_mask), op.Constant(value_ints=[1]), keepdims=1)
    return _gather_token(op, x, last)


def _gather_token(op, x, index):
    """x [batch, seq, hidden] at one position per row (index int64 [batch, 1]) -> [batch, hidden]."""
    row = op.Slice(x, op.Constant(value_ints=[0]), op.Constant(value_ints=[1]),
                   op.Constant(value_ints=[1]))  # [batch, 1, hidden]: the shape to expand to
    index = op.Expand(op.Unsqueeze(index, op.Constant(value_ints=[-1])), op.Shape(row))
    return op.Squeeze(op.GatherElements(x, index, axis=1), op.Constant(value_ints=[1]))


_POOLS = {"cls": _cls, "max": _max, "mean": _mean, "mean_sqrt_len_tokens": _mean_sqrt_len,
          "lasttoken": _last_token}
