"""RelativePositionBias (T5's bucketed bias) vs transformers' T5Attention: the bucket
table over every distance, and the graph's bias with and without a cache offset."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import torch

from transformers.models.t5.modeling_t5 import T5Attention, T5Config

from mobius.components.relative_position import RelativePositionBias, bucket_table
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model

HEADS = 3
CONFIGS = [(8, 6), (16, 10), (32, 128), (32, 20)]  # (num_buckets, max_distance)


@pytest.mark.parametrize("num_buckets,max_distance", CONFIGS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_bucket_table_is_transformers(num_buckets, max_distance, bidirectional):
    distance = torch.arange(-3 * max_distance, 3 * max_distance + 1)
    expected = T5Attention._relative_position_bucket(
        distance, bidirectional=bidirectional, num_buckets=num_buckets,
        max_distance=max_distance).numpy()
    table = bucket_table(num_buckets, max_distance, bidirectional)
    got = table[np.clip(distance.numpy(), -max_distance, max_distance) + max_distance]
    np.testing.assert_array_equal(got, expected)
    assert len(set(got.tolist())) > num_buckets // 2  # log and exact buckets both reached


def _transformers_bias(weight, num_buckets, max_distance, decoder, queries, keys, past):
    config = T5Config(d_model=12, d_kv=4, num_heads=HEADS, is_decoder=decoder,
                      relative_attention_num_buckets=num_buckets,
                      relative_attention_max_distance=max_distance)
    attention = T5Attention(config, has_relative_attention_bias=True)
    with torch.no_grad():
        attention.relative_attention_bias.weight.copy_(torch.from_numpy(weight))
        return attention.compute_bias(queries, keys, past_seen_tokens=past).numpy()


@pytest.mark.parametrize("decoder,queries,past", [(False, 13, 0), (True, 9, 0), (True, 1, 12)])
def test_graph_bias_matches_transformers(tmp_path, decoder, queries, past):
    num_buckets, max_distance = 16, 10
    weight = np.random.default_rng(0).standard_normal((num_buckets, HEADS)).astype(np.float32)
    with build_context(None, ir.DataType.FLOAT):
        bias = RelativePositionBias(num_buckets, HEADS, max_distance, bidirectional=not decoder)
    attach_arrays(bias, {"weight": weight}, tmp_path)
    model = component_model([("q", ir.DataType.INT64, ["q"]), ("k", ir.DataType.INT64, ["k"])],
                            lambda op, q, k: bias(op, q, k), ["bias"])
    keys = past + queries
    (got,) = run_model(model, {"q": np.arange(past, keys, dtype=np.int64),
                               "k": np.arange(keys, dtype=np.int64)})
    expected = _transformers_bias(weight, num_buckets, max_distance, decoder, queries, keys, past)
    assert got.shape == (1, HEADS, queries, keys)
    np.testing.assert_array_equal(got, expected)
