"""RelativePositionBias (T5's bucketed bias) vs transformers' T5Attention: the bucket
table over every distance, and the graph's bias with and without a cache offset
(transformers' side recorded at build time, relative_position_cases.py)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components import relative_position_cases as cases
from mobius.components.relative_position import RelativePositionBias, bucket_table
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.recorded_arrays import load

HEADS = cases.HEADS


@pytest.mark.parametrize("num_buckets,max_distance", cases.CONFIGS)
@pytest.mark.parametrize("bidirectional", [True, False])
def test_bucket_table_is_transformers(num_buckets, max_distance, bidirectional):
    distance = np.arange(-3 * max_distance, 3 * max_distance + 1)
    expected = load(cases, "buckets")[cases.table_key(num_buckets, max_distance, bidirectional)]
    table = bucket_table(num_buckets, max_distance, bidirectional)
    got = table[np.clip(distance, -max_distance, max_distance) + max_distance]
    np.testing.assert_array_equal(got, expected)
    assert len(set(got.tolist())) > num_buckets // 2  # log and exact buckets both reached


@pytest.mark.parametrize("decoder,queries,past", cases.BIASES)
def test_graph_bias_matches_transformers(tmp_path, decoder, queries, past):
    num_buckets, max_distance = cases.BIAS_BUCKETS, cases.BIAS_DISTANCE
    recorded = load(cases, "bias")
    with build_context(None, ir.DataType.FLOAT):
        bias = RelativePositionBias(num_buckets, HEADS, max_distance, bidirectional=not decoder)
    attach_arrays(bias, {"weight": recorded["weight"]}, tmp_path)
    model = component_model([("q", ir.DataType.INT64, ["q"]), ("k", ir.DataType.INT64, ["k"])],
                            lambda op, q, k: bias(op, q, k), ["bias"])
    keys = past + queries
    (got,) = run_model(model, {"q": np.arange(past, keys, dtype=np.int64),
                               "k": np.arange(keys, dtype=np.int64)})
    expected = recorded[cases.bias_key(decoder, queries, past)]
    assert got.shape == (1, HEADS, queries, keys)
    np.testing.assert_array_equal(got, expected)
