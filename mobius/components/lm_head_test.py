"""LMHead: logits = x @ W^T (+ b) from W [vocab, hidden] as stored; a tied head
reads the embedding's own initializer."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.embedding import Embedding
from mobius.components.lm_head import LMHead
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model

VOCAB, HIDDEN = 37, 12
RNG = np.random.default_rng(0)


@pytest.mark.parametrize("bias", [False, True])
def test_untied_head_matches_numpy(bias, tmp_path):
    weight = RNG.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    b = RNG.standard_normal(VOCAB).astype(np.float32)
    with build_context(None, ir.DataType.FLOAT):
        head = LMHead(HIDDEN, VOCAB, bias)
    attach_arrays(head, {"weight": weight, **({"bias": b} if bias else {})}, tmp_path)
    model = component_model([("x", ir.DataType.FLOAT, ["batch", "seq", HIDDEN])],
                            lambda op, x: head(op, x), ["logits"])
    # The checkpoint's [vocab, hidden] layout is stored as is: no transposed copy.
    assert [list(v.shape) for v in model.graph.initializers.values()
            if v.name.endswith("weight")] == [[VOCAB, HIDDEN]]
    x = RNG.standard_normal((2, 5, HIDDEN)).astype(np.float32)
    (logits,) = run_model(model, {"x": x})
    expected = x @ weight.T + (b if bias else 0)
    assert logits.shape == (2, 5, VOCAB)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_tied_head_reads_the_embedding_initializer(tmp_path):
    table = RNG.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    with build_context(None, ir.DataType.FLOAT):
        embedding = Embedding(VOCAB, HIDDEN)
        head = LMHead(HIDDEN, VOCAB, tied=embedding)
    assert list(head.named_parameters()) == []  # nothing of its own to attach
    attach_arrays(embedding, {"weight": table}, tmp_path)
    model = component_model([("ids", ir.DataType.INT64, ["batch", "seq"])],
                            lambda op, ids: head(op, embedding(op, ids)), ["logits"])
    matrices = [v for v in model.graph.initializers.values() if len(v.shape) == 2]
    assert len(matrices) == 1
    gemm = next(n for n in model.graph if n.op_type == "Gemm")
    gather = next(n for n in model.graph if n.op_type == "Gather")
    assert gemm.inputs[1] is gather.inputs[0]
    ids = np.array([[3, 0, 36], [7, 7, 1]], np.int64)
    (logits,) = run_model(model, {"ids": ids})
    np.testing.assert_allclose(logits, table[ids] @ table.T, rtol=1e-5, atol=1e-5)
