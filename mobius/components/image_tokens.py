"""The embedding graph of a vision-language package (LLaVA, Gemma 3, Qwen2.5-VL):
token embeddings with the image-placeholder positions replaced, in order, by the
vision model's features (transformers' ``masked_scatter`` as ONNX ops)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.context import get_build_dtype
from mobius.weights.dtypes import numpy_dtype


def image_positions(op, input_ids, image_token_id: int):
    """(is_image [batch, seq] bool, the ids to look up): image tokens read row 0
    instead, since the token id itself may lie past the table."""
    is_image = op.Equal(input_ids, op.Constant(value_int=image_token_id))
    return is_image, op.Where(is_image, op.Constant(value_int=0), input_ids)


def merge_image_features(op, is_image, embeds, image_features, hidden: int):
    """embeds [batch, seq, hidden] with the image positions taken, in order
    (row-major over [batch, seq]), from image_features [n, hidden]. Image tokens
    beyond the n features (and every position when n = 0, e.g. decode steps) read
    a zero row instead of failing."""
    flat = op.Reshape(is_image, op.Constant(value_ints=[-1]))  # [batch * seq]
    order = op.Sub(op.CumSum(op.Cast(flat, to=ir.DataType.INT64), op.Constant(value_int=0)),
                   op.Constant(value_int=1))  # k-th image token -> k - 1 ... -> feature row
    count = op.Shape(image_features, start=0, end=1)  # [1]: the zero row's index
    zero_row = op.Constant(value=ir.tensor(
        np.zeros((1, hidden), dtype=numpy_dtype(get_build_dtype()))))
    rows = op.Concat(image_features, zero_row, axis=0)  # [n + 1, hidden]
    index = op.Where(flat, op.Min(order, count), count)
    picked = op.Reshape(op.Gather(rows, index, axis=0), op.Shape(embeds))
    return op.Where(op.Unsqueeze(is_image, op.Constant(value_ints=[-1])), picked, embeds)
