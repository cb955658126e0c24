"""Input Gram matrices of a graph's MatMuls, from running the float graph in onnxruntime.

Calibrated quantization (gptq.py) needs, per weight, H = sum of x^T x over the
inputs x [tokens, K] the weight's MatMul sees. The builder holds no torch:
the graph it is about to quantize *is* the float model, so the quantize pass
hands it here as it stands (fusions done, weights still float). The MatMuls'
input values become extra graph outputs for the run and are removed again;
onnxruntime's CPU EP runs one prefill per calibration window from an empty
cache, and each window's activations are folded into one float64 K x K sum
per distinct input value (the Q/K/V projections, or gate and up, read one
input and share one matrix) and then dropped, so memory holds the sums, never
the activations.

Only graph inputs that a prefill from token ids defines are fed (ids,
attention mask, positions, token types, empty caches); a graph taking
anything else (a vision encoder's pixels, a decoder fed embeddings) is
reported by the caller and quantized without calibration.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence

import numpy as np
import onnx_ir as ir

from mobius.errors import MobiusError
from mobius.quantize.calibration import CalibrationText


TOKEN_IDS = "input_ids"
_POSITIONS = "position_ids"
_ONES = "attention_mask"
_ZEROS = "token_type_ids"


def can_calibrate(graph: ir.Graph) -> bool:
    """Whether :func:`gram_matrices` can feed every input of ``graph``."""
    return any(v.name == TOKEN_IDS for v in graph.inputs) and all(
        _feedable(v) for v in graph.inputs)


def gram_matrices(model: ir.Model, activations: Sequence[ir.Value],
                  calibration: CalibrationText) -> dict[str, np.ndarray]:
    """activation value name -> float64 [K, K] sum of x^T x over ``calibration``'s windows."""
    values = list({id(v): v for v in activations}.values())
    for i, value in enumerate(values):
        if value.name is None:
            value.name = f"calibration_activation_{i}"
    session = _session(model, values)
    names = [v.name for v in values]
    sums = {}
    windows = calibration.windows
    if calibration.progress:
        from tqdm import tqdm

        windows = tqdm(windows, unit="window", desc=f"calibrating on {calibration.path}")
    for window in windows:
        outputs = session.run(names, _feeds(model.graph, window))
        for name, x in zip(names, outputs):
            x = x.reshape(-1, x.shape[-1]).astype(np.float32)
            gram = (x.T @ x).astype(np.float64)
            sums[name] = sums[name] + gram if name in sums else gram
    return sums


def _session(model: ir.Model, values: list[ir.Value]):
    """A CPU-EP session of ``model`` with ``values`` as extra outputs (the model is left
    as it was). Saved with external data to a temporary folder: an in-memory
    protobuf stops at 2 GB, less than a 1B model's float32 weights."""
    import onnxruntime as ort

    outputs = list(model.graph.outputs)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory(prefix="mobius-calibration-") as folder:
        path = os.path.join(folder, "model.onnx")
        model.graph.outputs.extend(v for v in values if v not in outputs)
        try:
            ir.save(model, path, external_data="model.onnx.data")
        finally:
            model.graph.outputs.clear()
            model.graph.outputs.extend(outputs)
        try:
            return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own exception types
            raise MobiusError(f"--quant-calibration: onnxruntime's CPU EP cannot run this "
                              f"float graph to calibrate it "
                              f"({str(error).splitlines()[0][:200]}); build without "
                              f"calibration or for --ep cpu") from None


def _feedable(value: ir.Value) -> bool:
    if value.name in (TOKEN_IDS, _POSITIONS, _ONES, _ZEROS):
        return True
    dtype = value.dtype
    return dtype is not None and dtype.is_floating_point() and value.shape is not None


def _feeds(graph: ir.Graph, window: np.ndarray) -> dict[str, np.ndarray]:
    """One prefill of ``window`` (batch 1) from an empty cache."""
    feeds = {}
    length = len(window)
    for value in graph.inputs:
        dtype = value.dtype.numpy()
        if value.name == TOKEN_IDS:
            feeds[value.name] = window[None].astype(dtype)
        elif value.name == _POSITIONS:
            feeds[value.name] = np.arange(length)[None].astype(dtype)
        elif value.name == _ONES:
            feeds[value.name] = np.ones((1, length), dtype)
        elif value.name == _ZEROS:
            feeds[value.name] = np.zeros((1, length), dtype)
        else:  # a cache or state: empty (batch 1, every run-time length 0)
            shape = [d if isinstance(d, int) else (1 if i == 0 else 0)
                     for i, d in enumerate(value.shape)]
            feeds[value.name] = np.zeros(shape, dtype)
    return feeds
