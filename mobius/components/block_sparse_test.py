"""BlockSparsePattern inside causal_padding_mask: Phi-3-small's local + vertical-stride
block layout, per head or shared, at token positions (left and right padding, a cache)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.attention_mask import causal_padding_mask
from mobius.components.block_sparse import BlockSparsePattern
from testing.onnx_graphs import component_model, run_model


def _visible(pattern: BlockSparsePattern, attention_mask: np.ndarray, seq_len: int):
    model = component_model(
        inputs=[("input_ids", ir.DataType.INT64, ["batch", "seq"]),
                ("attention_mask", ir.DataType.INT64, ["batch", "total"])],
        forward=lambda op, ids, mask: causal_padding_mask(op, ids, mask, ir.DataType.FLOAT,
                                                          pattern=pattern),
        outputs=["mask"])
    feeds = {"input_ids": np.zeros((attention_mask.shape[0], seq_len), np.int64),
             "attention_mask": attention_mask.astype(np.int64)}
    (mask,) = run_model(model, feeds)
    return mask == 0


def _expected(pattern: BlockSparsePattern, attention_mask: np.ndarray, seq_len: int):
    """Token by token: query token t sees key token s <= t when s // B is one of the
    local_blocks nearest blocks or a vertical block of the head."""
    batch, total = attention_mask.shape
    heads = 1 if pattern.homo_head else pattern.num_heads
    step = max(1, pattern.vert_stride // pattern.num_heads)
    out = np.zeros((batch, heads, seq_len, total), bool)
    for b in range(batch):
        position = np.cumsum(attention_mask[b]) - 1
        for h in range(heads):
            for i in range(seq_len):
                q = total - seq_len + i
                for k in range(q + 1):
                    if not attention_mask[b, k]:
                        continue
                    qb, kb = position[q] // pattern.block_size, position[k] // pattern.block_size
                    offset = 0 if pattern.homo_head else h * step
                    out[b, h, i, k] = (qb - kb < pattern.local_blocks
                                       or (kb + offset + 1) % pattern.vert_stride == 0)
    return out


CASES = {
    # name: (block, local, vert, homo, heads, attention_mask rows, seq_len)
    "prefill_left_padded": (2, 1, 3, False, 4, [[1] * 11, [0, 0, 0] + [1] * 8], 11),
    "homo": (2, 1, 3, True, 4, [[1] * 11, [0, 0] + [1] * 9], 11),
    "decode_with_past": (2, 2, 4, False, 2, [[1] * 13, [0] * 4 + [1] * 9], 1),
    "right_padded_gap": (3, 1, 2, False, 8, [[1] * 10, [1] * 5 + [0] * 3 + [1] * 2], 2),
    "stride_over_heads": (1, 2, 8, False, 2, [[1] * 12], 12),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mask_is_the_block_layout_at_token_positions(case):
    block, local, vert, homo, heads, rows, seq_len = CASES[case]
    pattern = BlockSparsePattern(block, local, vert, homo, heads)
    attention_mask = np.array(rows, np.int64)
    got = _visible(pattern, attention_mask, seq_len)
    expected = _expected(pattern, attention_mask, seq_len)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    assert (got.sum(-1)[..., -1] > 0).all()  # the last query always sees its own block


def test_heads_differ_unless_homo():
    attention_mask = np.ones((1, 12), np.int64)
    hetero = _visible(BlockSparsePattern(2, 1, 4, False, 4), attention_mask, 12)
    assert len({hetero[0, h].tobytes() for h in range(4)}) == 4
