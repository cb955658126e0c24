"""module_scope qualifies the initializer names of a submodule called from a method."""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.scope import module_scope
from mobius.context import build_context
from testing.onnx_graphs import component_model


class _Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Linear(4, 3, False)


def _initializers(call) -> set[str]:
    with build_context(None, ir.DataType.FLOAT):
        outer = _Outer()
    model = component_model([("x", ir.DataType.FLOAT, [2, 4])], lambda op, x: call(op, outer, x),
                            ["y"])
    return set(model.graph.initializers)


def test_scope_qualifies_names():
    def scoped(op, outer, x):
        with module_scope(op, "model", "outer"):
            return outer.inner(op, x)

    assert _initializers(scoped) == {"model.outer.inner.weight"}


def test_without_scope_names_are_bare():
    assert _initializers(lambda op, outer, x: outer.inner(op, x)) == {"inner.weight"}
