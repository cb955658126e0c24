"""Image-text-to-text (LLaVA-style VLMs): three models, the layout of
onnxruntime-genai's multi-modal pipeline (vision -> embedding -> decoder).

``vision`` (optimizer role vision)
    pixel_values [num_images, channels, height, width] (build dtype)
    -> image_features [num_image_tokens, hidden]  (all images' tokens, in order)
``embedding`` (optimizer role embedding)
    input_ids int64 [batch_size, sequence_length], image_features [num_image_tokens, hidden]
    -> inputs_embeds [batch_size, sequence_length, hidden]
    (decode steps pass zero image features: [0, hidden])
``model`` (optimizer role decoder: the only one GQA fusion touches)
    the causal-LM contract (mobius/tasks/causal_lm.py) with ``inputs_embeds``
    [batch_size, sequence_length, hidden] in place of input_ids.

``hidden`` is the decoder's hidden size: the projector maps image features
into the text embedding space. image_features is rank 2 because genai
allocates it as [num_image_tokens, hidden] (the count its processor reports)
and hands the same buffer from the vision to the embedding session.

The module protocol (mobius/models/llava.py implements it):

* ``image_input_shape``: (channels, height, width) the vision tower takes;
* ``encode_images(op, pixel_values)`` -> image_features;
* ``embed(op, input_ids, image_features)`` -> inputs_embeds;
* ``language_model``: a causal LM module accepting ``inputs_embeds``;
* ``image_token_id``: the placeholder token (genai_config ``model.image_token_id``).
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir
from onnxscript import nn
from onnxscript._internal.builder import GraphBuilder

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.tasks.causal_lm import (BATCH, NAMED_DIMS, OPSET, SEQ, TaskFlags, build_causal_lm,
                                    output_value)
from mobius.tasks.concrete_dims import check_io_dims

NUM_IMAGES, NUM_IMAGE_TOKENS = "num_images", "num_image_tokens"
IMAGE_DIMS = (NUM_IMAGES, NUM_IMAGE_TOKENS)
#: every symbolic dim of the three models' graph I/O (TaskFlags.use_concrete_dims)
VISION_LANGUAGE_DIMS = (*NAMED_DIMS, *IMAGE_DIMS)


def build_vision_language(module: nn.Module, config: ArchitectureConfig,
                          flags: TaskFlags = TaskFlags()) -> dict[str, ir.Model]:
    """Package key (model.onnx / <key>.onnx) -> graph; the builder optimizes each
    with its role (vision, embedding, decoder)."""
    return {
        "vision": build_vision(module, config, flags),
        "embedding": build_embedding(module, config, flags),
        "model": build_causal_lm(module.language_model, config,
                                 dataclasses.replace(flags, inputs_embeds=True)),
    }


def _graph() -> tuple[ir.Graph, GraphBuilder]:
    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name="main_graph")
    return graph, GraphBuilder(graph)


def _model(graph: ir.Graph, flags: TaskFlags) -> ir.Model:
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    if flags.use_concrete_dims:
        check_io_dims(model, VISION_LANGUAGE_DIMS)
    return model


def build_vision(module: nn.Module, config: ArchitectureConfig,
                 flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = _graph()
    pixel_values = builder.input("pixel_values", dtype, [NUM_IMAGES, *module.image_input_shape])
    features = module.encode_images(builder.op, pixel_values)
    output_value(builder, features, "image_features", dtype, [NUM_IMAGE_TOKENS, config.hidden_size])
    return _model(graph, flags)


def build_embedding(module: nn.Module, config: ArchitectureConfig,
                    flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = _graph()
    input_ids = builder.input("input_ids", ir.DataType.INT64, [BATCH, SEQ])
    features = builder.input("image_features", dtype, [NUM_IMAGE_TOKENS, config.hidden_size])
    embeds = module.embed(builder.op, input_ids, features)
    output_value(builder, embeds, "inputs_embeds", dtype, [BATCH, SEQ, config.hidden_size])
    return _model(graph, flags)
