"""library_passes: RemoveUnusedNodesPass is skipped exactly where it would change nothing."""

from __future__ import annotations

import onnx.parser
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
import pytest

from mobius.rewrite import library_passes

_HEADER = '<ir_version: 10, opset_import: ["" : 23, "custom" : 1, "local" : 1]>\n'
_IF = ("agraph (float[2] x, bool c) => (float[2] y) {{ y = If(c) <then_branch = t () => "
       "(float[2] ty) {{ {then} }}, else_branch = e () => (float[2] ey) {{ ey = Neg(x) }}> }}")
_FUNCTION = ('agraph (float[2] x) => (float[2] y) {{ y = local.F(x) }}\n'
             '<domain: "local", opset_import: ["" : 23]>\nF (a) => (b) {{ {body} }}')
#: name -> (model text, whether RemoveUnusedNodesPass changes it)
_CASES = {
    "clean": ("agraph (float[2] x) => (float[2] y) { y = Relu(x) }", False),
    "dead node": ("agraph (float[2] x) => (float[2] y) { d = Neg(x)\n y = Relu(x) }", True),
    "dead chain": (
        "agraph (float[2] x) => (float[2] y) { d = Neg(x)\n e = Abs(d)\n y = Relu(x) }", True),
    "unused optional output": (
        "agraph (float[2] x) => (float[2] y) { y, mask = Dropout(x) }", True),
    "custom op's unused output": (
        "agraph (float[2] x) => (float[2] y) { y, extra = custom.Probe(x) }", False),
    "trailing absent input": ("agraph (float[2] x) => (float[2] y) { y = Clip(x, , ) }", True),
    "unused initializer": (
        "agraph (float[2] x) => (float[2] y) <float[1] k = {1.0}> { y = Relu(x) }", True),
    "used initializer": (
        "agraph (float[2] x) => (float[2] y) <float[1] k = {1.0}> { y = Add(x, k) }", False),
    "clean subgraph": (_IF.format(then="ty = Relu(x)"), False),
    "dead node in a subgraph": (_IF.format(then="d = Neg(x)\n ty = Relu(x)"), True),
    "clean function": (_FUNCTION.format(body="b = Relu(a)"), False),
    "dead node in a function": (_FUNCTION.format(body="d = Neg(a)\n b = Relu(a)"), True),
}


def _model(text: str) -> ir.Model:
    return ir.serde.deserialize_model(onnx.parser.parse_model(_HEADER + text))


def _bytes(model: ir.Model) -> bytes:
    return ir.serde.serialize_model(model).SerializeToString(deterministic=True)


@pytest.mark.parametrize("case", _CASES)
def test_skipped_exactly_where_the_pass_changes_nothing(case):
    text, changes = _CASES[case]
    model = _model(text)
    common_passes.RemoveUnusedNodesPass()(model)  # (its .modified counts removed nodes only)
    assert (_bytes(model) != _bytes(_model(text))) == changes
    assert library_passes._may_remove(_model(text)) == changes


@pytest.mark.parametrize("case", _CASES)
def test_result_equals_the_pass(case):
    ours, theirs = _model(_CASES[case][0]), _model(_CASES[case][0])
    library_passes.remove_unused_nodes(ours)
    common_passes.RemoveUnusedNodesPass()(theirs)
    assert _bytes(ours) == _bytes(theirs)


def test_batch_normalization_always_goes_to_the_pass():
    """The pass may drop its training_mode attribute even with every output used."""
    model = _model("agraph (float[1,2] x, float[2] s, float[2] b, float[2] m, float[2] v)"
                   " => (float[1,2] y)"
                   " { y = BatchNormalization <training_mode = 0> (x, s, b, m, v) }")
    assert library_passes._may_remove(model)
    library_passes.remove_unused_nodes(model)
    assert "training_mode" not in next(iter(model.graph)).attributes
