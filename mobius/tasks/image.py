"""What the image tasks share (image-classification, image-feature-extraction,
zero-shot-image-classification): one graph, built from the module's own I/O.

The module protocol (mobius/models/vit.py, dinov2.py, siglip.py, clip_models.py):

* ``inputs`` / ``outputs``: the graph's TensorSpecs, in contract order;
* ``forward(op, **inputs)`` -> {output name: value}.

pixel_values is [batch_size, channels, image_size, image_size] in the build
dtype: the graph is built for the configured image size (position tables are
used as stored, never interpolated), what the checkpoint's image processor
produces. The package carries that processor's preprocessor_config.json (the
checkpoint's own, else one written from the config: mobius/tasks/image_processor.py).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.tasks.task import ModelIO, TensorSpec, add_inputs, add_outputs, new_graph

BATCH, SEQ, TEXT_BATCH = "batch_size", "sequence_length", "text_batch_size"
NAMED_DIMS = (BATCH, SEQ, TEXT_BATCH)


def pixel_values(channels: int, image_size: int) -> TensorSpec:
    return TensorSpec("pixel_values", None, (BATCH, channels, image_size, image_size))


def image_io(module: nn.Module, config: ArchitectureConfig) -> dict[str, ModelIO]:
    return {"model": ModelIO(inputs=tuple(module.inputs), outputs=tuple(module.outputs))}


def build_image_model(module: nn.Module, config: ArchitectureConfig, flags) -> dict[str, ir.Model]:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    io = image_io(module, config)["model"]
    inputs = add_inputs(builder, io.inputs, dtype)
    outputs = module(builder.op, **inputs)
    add_outputs(builder, outputs, io.outputs, dtype)
    return {"model": ir.Model(graph, ir_version=10, producer_name="mobius")}
