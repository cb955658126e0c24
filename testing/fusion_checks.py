"""Small graphs in, one rule applied for one EP, op histograms and onnxruntime runs out.

Shared by the fusion-rule unit tests (mobius/rewrite/*_test.py)::

    model = make_model(nodes, [info("x", FLOAT, ["B", "S", 8])], [info("y", FLOAT, None)],
                       initializers=[weight("w", np.ones(8, np.float32))])
    before = run_ort(model, feeds)
    assert apply_rule(SkipSimplifiedLayerNormFusion(), model, "cpu") == 1
    assert histogram(model) == {...}
    np.testing.assert_allclose(run_ort(model, feeds), before, atol=1e-5)

Graphs are written with ``onnx.helper`` (opset 23, IR 10) and shape-inferred,
so values carry the dtypes and shapes the rules check, as in a real build.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir
from onnx import helper, numpy_helper
from onnx_ir.passes.common import RemoveUnusedNodesPass

from mobius.ep.registry import get_ep
from mobius.optimize.histogram import op_histogram
from mobius.rewrite.inline_functions import InlineUnsupportedFunctions
from mobius.rewrite.rule import Rule, RuleContext

OPSET = 23
FLOAT = onnx.TensorProto.FLOAT
FLOAT16 = onnx.TensorProto.FLOAT16


def info(name: str, elem_type: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, shape)


def weight(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def make_model(nodes: Sequence[onnx.NodeProto], inputs, outputs, initializers=(),
               opset: int = OPSET) -> ir.Model:
    """An IR model of ``nodes`` (shape-inferred, so every value has a dtype and shape)."""
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs),
                              initializer=list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=10)
    proto = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    onnx.checker.check_model(proto, full_check=True)
    return ir.from_proto(proto)


def copy_model(model: ir.Model) -> ir.Model:
    return ir.from_proto(ir.to_proto(model))


def context(ep: str = "cpu", dtype: ir.DataType = ir.DataType.FLOAT,
            role: str = "decoder") -> RuleContext:
    return RuleContext(get_ep(ep), dtype, role)


def apply_rule(rule: Rule, model: ir.Model, ep: str = "cpu",
               dtype: ir.DataType = ir.DataType.FLOAT, role: str = "decoder") -> int:
    """Applies ``rule`` in place as the pipeline would (nothing if it does not apply)."""
    ctx = context(ep, dtype, role)
    if not rule.applies(ctx):
        return 0
    return rule.apply(model, ctx)


def histogram(model: ir.Model) -> dict[str, int]:
    return dict(op_histogram(model))


def custom_domain_nodes(model: ir.Model) -> list[str]:
    return [f"{n.domain}::{n.op_type}" for n in model.graph if n.domain not in ("", "ai.onnx")]


def inline_for(model: ir.Model, ep: str) -> int:
    """The pipeline's inline stage for ``ep``, then the fold stage's dead-node removal.

    Body nodes that compute outputs the call leaves absent (a fused norm's
    mean / inv_std_var) are dead after inlining, and their outputs inherit the
    call's empty names; the pipeline's fold stage (RemoveUnused) drops them.
    """
    rule = InlineUnsupportedFunctions()
    ctx = context(ep)
    count = rule.apply(model, ctx) if rule.applies(ctx) else 0
    RemoveUnusedNodesPass()(model)
    return count


def without_functions(model: ir.Model) -> ir.Model:
    """A copy whose custom ops have no function bodies: onnxruntime must use its kernels."""
    copy = copy_model(model)
    copy.functions.clear()
    return copy


def run_ort(model: ir.Model, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Runs ``model`` on onnxruntime's CPU EP; graph optimizations off, so what runs is the graph."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(ir.to_proto(model).SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def check_model(model: ir.Model) -> None:
    """The ONNX checker (full) on the serialized model."""
    onnx.checker.check_model(ir.to_proto(model), full_check=True)
