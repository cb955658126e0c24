"""A window-sized KV cache for sliding-window layers (onnxruntime-genai).

A sliding-window layer (Mistral, Gemma 2/3, Cohere2, ...) never reads keys
older than its window, yet a shared past/present buffer holds
``max_length`` positions for every layer. onnxruntime-genai 0.18 can instead
give those layers a buffer of ``window + slack`` positions
(``model.decoder.sliding_window`` in genai_config, with the layer list) when
the graph's GroupQueryAttention manages it (``sliding_window_cache=1``:
the kernel keeps the newest positions at rows [0, L) and evicts in blocks of
``slack + 1``). mobius's attention_bias stays indexed by absolute position
(the kernel reads the resident columns), so the window and padding masks are
unchanged and exact.

Opt-in (``--sliding-window-cache``), because of what it costs
(genai 0.18 / onnxruntime 1.32):

- only an EP whose GQA kernel takes an attention_bias with a windowed cache
  (``caps.gqa_sliding_window_cache``: CPU);
- the kernel evicts by cache slot, and mobius's graph keeps genai's
  right-padding gap in the cache (seqlens_k is the slot count, the bias masks
  the gap), so a batch of prompts of different lengths loses in-window tokens
  of its shorter rows: batch 1 (or equal lengths) only;
- the package needs window-sized past buffers, so plain onnxruntime callers
  that grow the cache from empty are refused by the kernel;
- genai sizes the buffer ``min(max_length, window + slack)`` and the kernel
  rejects one smaller than the window: a generator's max_length must be at
  least the window.

It is applied only where the context length exceeds the window (otherwise
nothing is saved).
"""

from __future__ import annotations

import re
from typing import Any

import onnx_ir as ir

from mobius.config.architecture import ArchitectureConfig

_PAST = re.compile(r"past_key_values\.(\d+)\.key$")


def sliding_layers(config: ArchitectureConfig) -> dict[int, int]:
    """{layer: window} of the layers that attend through a sliding window."""
    windows = {i: config.layer_sliding_window(i) for i in range(config.num_hidden_layers)}
    return {i: w for i, w in windows.items() if w}


def apply_sliding_window_cache(model: ir.Model, genai: dict[str, Any],
                               config: ArchitectureConfig, context_length: int) -> bool:
    """Windows the KV cache of ``model``'s sliding layers; returns whether it did.

    Needs GroupQueryAttention on every sliding layer (the caller checks that the
    EP's kernel manages a windowed cache) and one window size for all of them.
    """
    layers = sliding_layers(config)
    if not layers or not genai["search"].get("past_present_share_buffer"):
        return False
    windows = set(layers.values())
    if len(windows) != 1 or context_length <= next(iter(windows)):
        return False
    window = windows.pop()
    attention = _gqa_by_layer(model)
    if not set(layers) <= set(attention):
        return False
    for layer in layers:
        node = attention[layer]
        node.attributes["local_window_size"] = ir.AttrInt64("local_window_size", window)
        node.attributes["sliding_window_cache"] = ir.AttrInt64("sliding_window_cache", 1)
        _rename_sequence_dims(model, layer)
    genai["model"]["decoder"]["sliding_window"] = {
        "window_size": window,
        "slide_key_value_cache": False,  # the EP evicts; genai only sizes the buffer
        "slide_inputs": False,
        "layers": sorted(layers),
        "cache_slack": 0,  # 0: the EP's default slack (CPU: 16 positions)
    }
    return True


def _gqa_by_layer(model: ir.Model) -> dict[int, ir.Node]:
    """The GroupQueryAttention node of each layer, found by the past key it reads."""
    found = {}
    for node in model.graph:
        if node.op_type != "GroupQueryAttention" or len(node.inputs) < 4:
            continue
        past = node.inputs[3]
        match = _PAST.match(past.name or "") if past is not None else None
        if match:
            found[int(match.group(1))] = node
    return found


def _rename_sequence_dims(model: ir.Model, layer: int) -> None:
    """A windowed layer's cache length is not the full layers': give it its own
    symbolic dim, so shape inference never unifies the two."""
    names = {f"past_key_values.{layer}.key", f"past_key_values.{layer}.value",
             f"present.{layer}.key", f"present.{layer}.value"}
    for value in [*model.graph.inputs, *model.graph.outputs]:
        if value.name in names and value.shape is not None and len(value.shape) == 4:
            dims = list(value.shape)
            if not isinstance(dims[2], int):
                dims[2] = ir.SymbolicDim(f"sliding_{dims[2].value}")
                value.shape = ir.Shape(dims)
