"""causal_padding_mask: causal + left padding + sliding window, with and without a KV cache."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.attention_mask import NON_CAUSAL, causal_padding_mask, token_blocks
from testing.onnx_graphs import component_model, run_model, run_reference
from testing.references import additive_mask

DTYPES = {
    ir.DataType.FLOAT: np.float32,
    ir.DataType.FLOAT16: np.float16,
    ir.DataType.BFLOAT16: ml_dtypes.bfloat16,
}


def _mask_model(dtype: ir.DataType, window: int | None):
    return component_model(
        inputs=[("input_ids", ir.DataType.INT64, ["batch", "seq"]),
                ("attention_mask", ir.DataType.INT64, ["batch", "total"])],
        forward=lambda op, ids, mask: causal_padding_mask(op, ids, mask, dtype, window),
        outputs=["mask"],
    )


def _run(dtype, window, attention_mask, seq_len):
    model = _mask_model(dtype, window)
    feeds = {"input_ids": np.zeros((attention_mask.shape[0], seq_len), np.int64),
             "attention_mask": attention_mask.astype(np.int64)}
    runner = run_reference if dtype == ir.DataType.BFLOAT16 else run_model
    (mask,) = runner(model, feeds)
    return mask


def _blocked(np_dtype) -> float:
    return float(ml_dtypes.finfo(np_dtype).min)


CASES = {
    # name: (attention_mask rows, seq_len, window)
    "prefill": ([[1, 1, 1, 1, 1, 1]], 6, None),
    "prefill_left_padded": ([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]], 6, None),
    "decode_with_past": ([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]], 1, None),
    "chunk_with_past": ([[1, 1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1, 1]], 3, None),
    "sliding_prefill": ([[1] * 9, [0, 0] + [1] * 7], 9, 3),
    "sliding_decode": ([[1] * 9, [0, 0, 0] + [1] * 6], 1, 4),
    "sliding_chunk": ([[1] * 10, [0] + [1] * 9], 4, 3),
    "window_larger_than_sequence": ([[0, 1, 1, 1, 1]], 5, 64),
}


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: d.name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_mask_matches_reference(case, dtype):
    rows, seq_len, window = CASES[case]
    attention_mask = np.array(rows, np.int64)
    np_dtype = DTYPES[dtype]
    got = _run(dtype, window, attention_mask, seq_len)
    assert got.dtype == np.dtype(np_dtype)
    assert got.shape == (attention_mask.shape[0], 1, seq_len, attention_mask.shape[1])
    expected = additive_mask(attention_mask, seq_len, window, _blocked(np_dtype))
    np.testing.assert_array_equal(got.astype(np.float64), expected)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: d.name)
def test_blocked_value_is_finite_so_padding_rows_do_not_become_nan(dtype):
    # Row 1's first query is padding and sees nothing at all.
    attention_mask = np.array([[1, 1, 1, 1], [0, 0, 1, 1]], np.int64)
    got = _run(dtype, None, attention_mask, 4).astype(np.float32)
    assert np.isfinite(got).all()
    assert (got[1, 0, 0] < -1e4).all()  # fully blocked row...
    # ... and softmax over it stays finite (uniform), unlike with -inf.
    row = got[1, 0, 0].astype(np.float64)
    weights = np.exp(row - row.max())
    assert np.isfinite(weights / weights.sum()).all()


def test_window_one_sees_only_itself():
    attention_mask = np.ones((1, 5), np.int64)
    got = _run(ir.DataType.FLOAT, 1, attention_mask, 5)
    np.testing.assert_array_equal(got[0, 0] == 0, np.eye(5, dtype=bool))


def test_sliding_window_counts_tokens_not_cache_slots():
    """onnxruntime-genai right-pads batches: row 1's cache holds a padding gap
    between its 3-token prompt and the generated token. The window (3) must
    cover the last 3 *tokens*, so it reaches past the gap to the prompt. The
    count comes from the mask: the graph reads no position_ids, whose origin a
    client chooses (transformers.js numbers Gemma 3's from 1)."""
    attention_mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 1]], np.int64)
    model = _mask_model(ir.DataType.FLOAT, 3)
    feeds = {"input_ids": np.zeros((2, 1), np.int64), "attention_mask": attention_mask}
    (mask,) = run_model(model, feeds)
    visible = mask[:, 0, 0] == 0
    assert visible[0].tolist() == [False, False, False, True, True, True]
    assert visible[1].tolist() == [False, True, True, False, False, True]


def _blocks_model(window: int | None, whole_blocks: bool = False):
    def forward(op, ids, mask):
        return causal_padding_mask(op, ids, mask, ir.DataType.FLOAT, window,
                                   token_blocks(op, ids, 9), whole_blocks=whole_blocks)

    return component_model(
        inputs=[("input_ids", ir.DataType.INT64, ["batch", "seq"]),
                ("attention_mask", ir.DataType.INT64, ["batch", "total"])],
        forward=forward, outputs=["mask"])


@pytest.mark.parametrize("window", [None, 2])
def test_token_blocks_see_each_other_both_ways_within_a_run_only(window):
    """Token 9 runs (tokens 1-3 and 5-6, after one past slot) are blocks: a block token
    also sees the later tokens of its own run, never another run's."""
    ids = np.array([[4, 9, 9, 9, 4, 9, 9]], np.int64)
    attention_mask = np.array([[1] * 8], np.int64)  # one past slot + 7 tokens
    model = _blocks_model(window)
    (mask,) = run_model(model, {"input_ids": ids, "attention_mask": attention_mask})
    seen = mask[0, 0] == 0  # [7 queries, 8 slots]
    expected = np.tril(np.ones((7, 8), bool), k=1)  # query i at slot i + 1
    if window:
        expected &= ~np.tril(np.ones((7, 8), bool), k=1 - window)
    for run in ((1, 2, 3), (5, 6)):
        for q in run:
            for k in run:  # the window still applies backwards (transformers: AND after OR)
                expected[q, k + 1] = window is None or q - k < window
    np.testing.assert_array_equal(seen, expected)
    marked = [v for n in model.graph for v in n.outputs if NON_CAUSAL in v.metadata_props]
    assert [v.producer().op_type for v in marked] == ["Where"]  # the mask, for GQA fusion to skip


def test_whole_blocks_see_each_other_past_the_window():
    """whole_blocks (transformers' OR after the window's AND): a block longer than the
    window sees itself whole; other tokens keep the window."""
    ids = np.array([[4, 9, 9, 9, 9, 4, 4]], np.int64)
    attention_mask = np.ones((1, 7), np.int64)
    (mask,) = run_model(_blocks_model(2, whole_blocks=True),
                        {"input_ids": ids, "attention_mask": attention_mask})
    seen = mask[0, 0] == 0
    expected = np.tril(np.ones((7, 7), bool)) & ~np.tril(np.ones((7, 7), bool), k=-2)
    expected[1:5, 1:5] = True
    np.testing.assert_array_equal(seen, expected)
