"""Calibration statistics gathered from the model as it will be quantized, not from the float one.

GPTQ (gptq.py) fits each weight to the inputs its MatMul sees. Taken from the
float model, those inputs lack the errors that the quantized earlier layers
add; in the package every layer sees them. GPTQ proper quantizes layer by
layer, gathering each layer's inputs from the model whose earlier layers
are already quantized (one run over the text per layer). Here the whole
model is rerun instead, ``passes`` times in all:

- pass 1: Gram matrices from the float graph, GPTQ factors from them;
- pass p > 1: every target weight is replaced, for the run only, by its
  dequantized value as pass p - 1's factors quantize it (the model the
  package would be), the Gram matrices are gathered again from that graph,
  and the factors are remade from them; the float weights are put back.

The weights are always quantized from their float values; only the
statistics change. Each extra pass costs one run over the text and one
quantization of every weight. Measured in docs/quantization.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import onnx_ir as ir

from mobius.quantize.activation_stats import gram_matrices
from mobius.quantize.calibration import CalibrationText
from mobius.quantize.gptq import DAMPING, Factor, gptq_factor
from mobius.quantize.quantized_weight import QuantizedWeight

#: (weight as stored, factor or None) -> its quantized value
Quantizer = Callable[["Target", "np.ndarray | None"], QuantizedWeight]


@dataclasses.dataclass(frozen=True)
class Target:
    """One weight the pass quantizes from float.

    Attributes:
        activation: the MatMul's (or head's) input, whose statistics fit it.
        weight: the float initializer, [K, N] or, where ``transposed``, [N, K].
        transposed: the LM head's Gemm layout.
    """

    activation: ir.Value
    weight: ir.Value
    transposed: bool = False


def calibrated_factors(model: ir.Model, targets: Sequence[Target],
                       calibration: CalibrationText, quantize: Quantizer,
                       passes: int = 1, damping: float = DAMPING) -> dict[str, Factor]:
    """Activation name -> GPTQ factor, from the float graph (pass 1) and then from the
    graph with ``targets`` quantized by the previous pass's factors."""
    if passes < 1:
        raise ValueError(f"calibration passes must be >= 1, got {passes}")
    activations = [t.activation for t in targets]
    factors = _factors(gram_matrices(model, activations, calibration), damping)
    for _ in range(passes - 1):
        with quantized_weights(targets, factors, quantize):
            grams = gram_matrices(model, activations, calibration)
        factors = _factors(grams, damping)
    return factors


@contextlib.contextmanager
def quantized_weights(targets: Sequence[Target], factors: dict, quantize: Quantizer):
    """Each target's initializer holds its dequantized value inside the block (as the
    package will compute with it), its float value again after."""
    originals = {}
    try:
        for target in targets:
            weight = target.weight
            if id(weight) in originals:  # one matrix read by two targets: swapped once
                continue
            source = weight.const_value
            quantized = quantize(target, factors.get(target.activation.name)).dequantize()
            array = quantized if target.transposed else quantized.T  # dequantize: [N, K]
            originals[id(weight)] = (weight, source)
            array = np.ascontiguousarray(array).astype(source.dtype.numpy())
            weight.const_value = ir.tensor(array, dtype=source.dtype)
        yield
    finally:
        for weight, source in originals.values():
            weight.const_value = source


def _factors(grams: dict[str, np.ndarray], damping: float) -> dict[str, Factor]:
    return {name: gptq_factor(grams.pop(name), damping) for name in list(grams)}
