"""Embedding: a Gather of checkpoint rows, in every build dtype."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.embedding import Embedding
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model, run_reference

DTYPES = [(ir.DataType.FLOAT, np.float32), (ir.DataType.FLOAT16, np.float16),
          (ir.DataType.BFLOAT16, ml_dtypes.bfloat16)]
VOCAB, DIM = 37, 12


@pytest.mark.parametrize("dtype, np_dtype", DTYPES, ids=lambda d: getattr(d, "name", ""))
def test_embedding_lookup(dtype, np_dtype, tmp_path):
    rng = np.random.default_rng(0)
    table = rng.standard_normal((VOCAB, DIM)).astype(np.float32)
    with build_context(None, dtype):
        embedding = Embedding(VOCAB, DIM)
    attach_arrays(embedding, {"weight": table}, tmp_path)
    model = component_model(
        inputs=[("input_ids", ir.DataType.INT64, ["batch", "seq"])],
        forward=lambda op, ids: embedding(op, ids),
        outputs=["hidden"],
    )
    ids = np.array([[0, 5, 36, 5], [1, 2, 3, 35]], np.int64)
    runner = run_reference if dtype == ir.DataType.BFLOAT16 else run_model
    (hidden,) = runner(model, {"input_ids": ids})
    assert hidden.dtype == np.dtype(np_dtype) and hidden.shape == (2, 4, DIM)
    # A lookup is exact: the rows, rounded once to the build dtype.
    np.testing.assert_array_equal(hidden.astype(np.float32),
                                  table.astype(np_dtype).astype(np.float32)[ids])


def test_embedding_from_f16_checkpoint_into_f32_build(tmp_path):
    table = np.random.default_rng(1).standard_normal((VOCAB, DIM)).astype(np.float16)
    with build_context(None, ir.DataType.FLOAT):
        embedding = Embedding(VOCAB, DIM)
    attach_arrays(embedding, {"weight": table}, tmp_path)
    model = component_model([("input_ids", ir.DataType.INT64, [1, 3])],
                            lambda op, ids: embedding(op, ids), ["hidden"])
    (hidden,) = run_model(model, {"input_ids": np.array([[4, 0, 9]], np.int64)})
    assert hidden.dtype == np.float32
    np.testing.assert_array_equal(hidden[0], table[[4, 0, 9]].astype(np.float32))
