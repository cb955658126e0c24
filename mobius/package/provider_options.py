"""genai_config.json ``provider_options`` for an EP, with graph capture made consistent.

The registry declares each EP's onnxruntime-genai provider options
(``EpCapabilities.provider_options``), whether it wants graph capture
(``enable_graph_capture``) and the option that turns it on
(``graph_capture_option``, ``graph_capture_by_default``). onnxruntime-genai turns
capture on per provider from one provider option (its ``IsGraphCaptureEnabled``):
``enable_cuda_graph`` for cuda and NvTensorRtRtx (for TensorRT-RTX genai then sets the session
config entry ``ep.nvtensorrtrtxexecutionprovider.nv_cuda_graph_enable``),
``enableGraphCapture`` for WebGPU, and for DML capture is on unless
``enable_graph_capture`` is "0". A captured graph is replayed on the same
buffer addresses, so capture is only possible when past and present KV share
one static buffer (``past_present_share_buffer``, i.e. the decoder uses
GroupQueryAttention). Hence:

* capture requested and KV buffers shared -> the option is "1";
* KV buffers not shared (e.g. a trt-rtx f32 build: no GQA) -> the option is
  "0" wherever it would otherwise be on (requested, or DML's default);
* otherwise the registry's options are passed through unchanged.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry

def genai_provider_options(caps: EpCapabilities, past_present_share_buffer: bool,
                           dtype: ir.DataType = ir.DataType.FLOAT,
                           quantized: bool = False) -> list[dict[str, dict[str, Any]]]:
    """The ``session_options.provider_options`` list for ``caps`` (see module docstring),
    with the EP's precision options for a ``dtype`` (``quantized``) build."""
    result = []
    key = caps.graph_capture_option
    for name, declared in caps.provider_options_for(dtype, quantized).items():
        options = dict(declared)
        if key is not None:
            if caps.enable_graph_capture and past_present_share_buffer:
                options[key] = "1"
            elif not past_present_share_buffer and (
                    options.get(key) == "1" or caps.enable_graph_capture
                    or (caps.graph_capture_by_default and options.get(key) != "0")):
                options[key] = "0"
        result.append({name: options})
    return result


def graph_capture_enabled(provider_options: list[dict[str, dict[str, Any]]]) -> bool:
    """Whether onnxruntime-genai would capture graphs with these provider options."""
    capture = {name: caps for caps in ep_registry for name in caps.provider_options
               if caps.graph_capture_option}
    for entry in provider_options:
        for name, options in entry.items():
            caps = capture.get(name)
            if caps is None:
                continue
            value = options.get(caps.graph_capture_option)
            if value == "1" or (caps.graph_capture_by_default and value != "0"):
                return True
    return False
