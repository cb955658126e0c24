"""The additive attention mask shared by all layers of one attention kind.

Built once per graph from ``attention_mask`` [batch, total_seq] (1 = real
token, 0 = padding). Query i of the current chunk sits at cache slot
``past + i``; it may see slot j when j <= past + i and the slot is not
padding. A sliding window is measured in tokens, not slots: the real tokens
counted up to the query's slot minus those up to the key's must be < window.
With left padding (transformers) the two agree; with onnxruntime-genai's
right-padded batches, whose caches hold a padding gap between prompt and
generated tokens, only the token count is right. The count comes from
``attention_mask`` alone, not from ``position_ids``: a client may number
positions from another origin (transformers.js feeds Gemma 3 positions from 1),
which RoPE takes (it attends by differences) but a window measured against the
mask's count would not. Blocked entries get the most
negative finite value of the dtype rather than -inf, so rows that see nothing
(left-padding queries) stay finite instead of turning into NaN.

``blocks`` (Gemma 3's images): a query also sees every key of its own block of
the current chunk, later ones included (bidirectional attention inside one image).
Such a mask is not causal: its value carries the ``NON_CAUSAL`` metadata key, so
rewrite rules that assume causality (GroupQueryAttention) leave it alone.

``pattern`` (Phi-3-small's block-sparse layers, mobius/components/block_sparse.py)
restricts the causal mask further by the same token positions, per head.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.weights.dtypes import numpy_dtype

#: metadata_props key on a mask value that lets some queries see later keys
NON_CAUSAL = "mobius.non_causal_mask"


def causal_padding_mask(op, input_ids, attention_mask, dtype: ir.DataType,
                        sliding_window: int | None = None, blocks=None, pattern=None,
                        whole_blocks: bool = False):
    """Returns the additive mask [batch, 1 (heads with a per-head ``pattern``), seq,
    total_seq] in ``dtype``.

    ``blocks`` [batch, seq] int64: each current token's block id, -1 outside any
    block (:func:`token_blocks`); a block's tokens see each other within the sliding
    window, or the whole block with ``whole_blocks``.
    """
    seq_len = op.Shape(input_ids, start=1, end=2)
    total_len = op.Shape(attention_mask, start=1, end=2)
    past_len = op.Sub(total_len, seq_len)
    zero = op.Constant(value_int=0)
    one = op.Constant(value_int=1)
    query_slots = op.Add(op.Range(zero, op.Squeeze(seq_len), one), past_len)  # [seq]
    key_slots = op.Range(zero, op.Squeeze(total_len), one)  # [total]
    query_slots = op.Unsqueeze(query_slots, op.Constant(value_ints=[1]))  # [seq, 1]
    allowed = op.LessOrEqual(key_slots, query_slots)  # [seq, total]
    if blocks is not None and not whole_blocks:
        allowed = op.Or(allowed, _same_block(op, blocks, past_len))  # [batch, 1, seq, total]
    if sliding_window or pattern is not None:
        key_positions = op.Sub(op.CumSum(attention_mask, one), one)  # [batch, total]
        query_positions = op.Slice(key_positions, past_len, total_len,
                                   op.Constant(value_ints=[1]))  # [batch, seq]
    if pattern is not None:
        allowed = op.And(allowed, pattern.allowed(op, query_positions, key_positions))
    if sliding_window:
        distance = op.Sub(op.Unsqueeze(query_positions, op.Constant(value_ints=[1, 3])),
                          op.Unsqueeze(key_positions, op.Constant(value_ints=[1, 2])))
        allowed = op.And(allowed, op.Less(distance, op.Constant(value_int=sliding_window)))
    if blocks is not None and whole_blocks:
        allowed = op.Or(allowed, _same_block(op, blocks, past_len))
    not_padding = op.Cast(
        op.Unsqueeze(attention_mask, op.Constant(value_ints=[1, 2])), to=ir.DataType.BOOL
    )  # [batch, 1, 1, total]
    allowed = op.And(allowed, not_padding)  # [batch, 1, seq, total]
    np_dtype = numpy_dtype(dtype)
    blocked = np.array(_most_negative(np_dtype), dtype=np_dtype)
    mask = op.Where(allowed, op.Constant(value=ir.tensor(np.array(0, dtype=np_dtype))),
                    op.Constant(value=ir.tensor(blocked)))
    if blocks is not None:
        mask.metadata_props[NON_CAUSAL] = "blocks"
    return mask


def token_blocks(op, input_ids, token_id: int):
    """[batch, seq] int64: the k-th run of consecutive ``token_id`` tokens in the
    chunk is block k (0, 1, ...); any other token is -1."""
    is_token = op.Equal(input_ids, op.Constant(value_int=token_id))
    ones = op.Cast(is_token, to=ir.DataType.INT64)
    one = op.Constant(value_ints=[1])
    before = op.Pad(op.Slice(ones, op.Constant(value_ints=[0]), op.Constant(value_ints=[-1]), one),
                    op.Constant(value_ints=[0, 1, 0, 0]))  # the previous token's flag
    starts = op.Mul(ones, op.Sub(op.Constant(value_int=1), before))
    ids = op.Sub(op.CumSum(starts, op.Constant(value_int=1)), op.Constant(value_int=1))
    return op.Where(is_token, ids, op.Constant(value_int=-1))


def _same_block(op, blocks, past_len):
    """[batch, 1, seq, total]: query and key lie in one block of the current chunk."""
    pads = op.Concat(op.Constant(value_ints=[0]), past_len, op.Constant(value_ints=[0, 0]), axis=0)
    key_blocks = op.Pad(blocks, pads, op.Constant(value_int=-1))  # past keys: no block
    queries = op.Unsqueeze(blocks, op.Constant(value_ints=[1, 3]))  # [batch, 1, seq, 1]
    same = op.Equal(queries, op.Unsqueeze(key_blocks, op.Constant(value_ints=[1, 2])))
    return op.And(same, op.GreaterOrEqual(queries, op.Constant(value_int=0)))


def _most_negative(np_dtype) -> float:
    import ml_dtypes

    if np_dtype == np.dtype(ml_dtypes.bfloat16):
        return float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)
    return float(np.finfo(np_dtype).min)


def padding_mask(op, attention_mask, dtype: ir.DataType, window: int | None = None,
                 query_ids=None):
    """Bidirectional (encoder) additive mask [batch, 1, seq, seq] from a 0/1 attention_mask;
    with ``query_ids`` [batch, q] (cross-attention's decoder tokens): [batch, 1, q, seq].

    Materialized over the query axis too: onnxruntime's Attention kernel does
    not broadcast the mask's query dimension. ``window`` (self-attention only): a
    query also sees only keys at most ``window`` positions away, either side
    (ModernBERT's local layers).
    """
    np_dtype = numpy_dtype(dtype)
    keys = op.Cast(op.Unsqueeze(attention_mask, op.Constant(value_ints=[1, 2])),
                   to=ir.DataType.BOOL)
    queries = attention_mask if query_ids is None else query_ids
    queries = op.Unsqueeze(op.GreaterOrEqual(queries, op.Constant(value_int=0)),
                           op.Constant(value_ints=[1, 3]))  # all true, [batch, 1, seq, 1]
    allowed = op.And(queries, keys)
    if window is not None:
        one = op.Constant(value_int=1)
        ones = op.Add(op.Mul(attention_mask, op.Constant(value_int=0)), one)
        slots = op.Sub(op.CumSum(ones, one), one)  # 0..seq-1, [batch, seq]
        distance = op.Abs(op.Sub(op.Unsqueeze(slots, op.Constant(value_ints=[1, 3])),
                                 op.Unsqueeze(slots, op.Constant(value_ints=[1, 2]))))
        allowed = op.And(allowed, op.LessOrEqual(distance, op.Constant(value_int=window)))
    blocked = np.array(_most_negative(np_dtype), dtype=np_dtype)
    return op.Where(allowed, op.Constant(value=ir.tensor(np.array(0, dtype=np_dtype))),
                    op.Constant(value=ir.tensor(blocked)))
