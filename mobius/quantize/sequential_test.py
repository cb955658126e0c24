"""Sequential calibration statistics on a two-MatMul graph run in onnxruntime.

ids -> Gather(table) -> MatMul(W1) -> MatMul(W2). The table's rows span a
low-rank subspace, so the float inputs of W2 leave most directions unused,
and one-shot GPTQ parks W2's rounding error there; quantizing W1 puts energy
back into those directions, which only the second pass's statistics see.
On held-out tokens, with W1 quantized as the package has it, W2's output
error must drop with two passes; with statistics not taken from the quantized
graph (or weights not restored) the checks fail.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.quantize.calibration import CalibrationText
from mobius.quantize.gptq import quantize_gptq_kn
from mobius.quantize.rtn import MSE, quantize_rtn_kn
from mobius.quantize.sequential import Target, calibrated_factors, quantized_weights

VOCAB, HIDDEN, RANK, WINDOW = 512, 128, 16, 64
_FLOAT = ir.TensorType(ir.DataType.FLOAT)


def _graph(seed: int = 0):
    """(model, target of W1, target of W2): the float graph and what the pass quantizes."""
    rng = np.random.default_rng(seed)
    table = (rng.normal(size=(VOCAB, RANK)) @ rng.normal(size=(RANK, HIDDEN))).astype(np.float32)
    w1 = rng.normal(size=(HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)
    w1[::32] *= 30  # an outlier in every block: int4 rounds W1 coarsely
    w1 = w1.astype(np.float32)
    w2 = rng.normal(size=(HIDDEN, HIDDEN)).astype(np.float32)
    ids = ir.Value(name="input_ids", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([1, WINDOW]))
    consts = [ir.Value(name=n, type=_FLOAT, shape=ir.Shape(a.shape),
                       const_value=ir.tensor(a, name=n))
              for n, a in (("table", table), ("w1", w1), ("w2", w2))]
    gather = ir.Node("", "Gather", [consts[0], ids], name="gather")
    first = ir.Node("", "MatMul", [gather.outputs[0], consts[1]], name="first")
    second = ir.Node("", "MatMul", [first.outputs[0], consts[2]], name="second")
    for node, name in ((gather, "x"), (first, "h"), (second, "y")):
        node.outputs[0].name, node.outputs[0].type = name, _FLOAT
        node.outputs[0].shape = ir.Shape([1, WINDOW, HIDDEN])
    graph = ir.Graph([ids], [second.outputs[0]], nodes=[gather, first, second],
                     initializers=consts, opset_imports={"": 17})
    model = ir.Model(graph, ir_version=9)
    return model, Target(gather.outputs[0], consts[1]), Target(first.outputs[0], consts[2])


def _quantize(target: Target, factor):
    """int4: W1 by RTN (its error is not fed back, so W2's inputs move), W2 by GPTQ."""
    weight = target.weight.const_value.numpy()
    if factor is None or target.weight.name == "w1":
        return quantize_rtn_kn(weight, 4, 32, True, MSE)
    return quantize_gptq_kn(weight, factor, 4, 32, True, MSE)


def _calibration(seed: int) -> CalibrationText:
    ids = np.random.default_rng(seed).integers(0, VOCAB, size=(8, WINDOW))
    return CalibrationText("synthetic", ids, passes=1)


def test_second_pass_fits_the_quantized_inputs():
    model, first, second = _graph()
    table = model.graph.initializers["table"].const_value.numpy()
    w1, w2 = (t.weight.const_value.numpy().copy() for t in (first, second))
    held_out = table[np.random.default_rng(1).integers(0, VOCAB, size=512)]
    errors = []  # one pass, two passes, RTN
    for passes in (1, 2):
        factors = calibrated_factors(model, [first, second], _calibration(0), _quantize, passes,
                                     damping=0.01)
        q1 = _quantize(first, factors.get(first.activation.name)).dequantize().T
        q2 = _quantize(second, factors[second.activation.name]).dequantize().T
        inputs = held_out @ q1  # what W2 sees in the package
        errors.append(np.linalg.norm(inputs @ w2 - inputs @ q2))
        # the float weights are back after the passes
        np.testing.assert_array_equal(first.weight.const_value.numpy(), w1)
        np.testing.assert_array_equal(second.weight.const_value.numpy(), w2)
    rtn = _quantize(second, None).dequantize().T
    errors.append(np.linalg.norm(inputs @ w2 - inputs @ rtn))
    assert errors[1] < 0.9 * errors[0] and errors[1] < errors[2], errors


def test_quantized_weights_swaps_and_restores():
    model, first, second = _graph()
    original = second.weight.const_value
    expected = _quantize(second, None).dequantize().T
    with quantized_weights([first, second], {}, _quantize):
        inside = second.weight.const_value.numpy()
        np.testing.assert_array_equal(inside, expected)
        assert not np.array_equal(inside, original.numpy())
    assert second.weight.const_value is original
