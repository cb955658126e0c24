"""Automatic speech recognition with an encoder-decoder (Whisper): two models, the
layout and names of onnxruntime-genai's whisper pipeline (its model builder's
encoder.onnx / decoder.onnx and genai_config ``encoder`` / ``decoder`` sections).

``encoder`` (optimizer role encoder)
    audio_features [batch_size, num_mel_bins, num_frames] (build dtype; the log-mel
    spectrogram transformers calls ``input_features``; num_frames is fixed by the
    checkpoint: 2 * max_source_positions)
    -> encoder_hidden_states [batch_size, encoder_length, hidden]
    -> present_key_cross_{i} / present_value_cross_{i}
       [batch_size, num_heads, encoder_length, head_dim], one pair per *decoder* layer
``decoder`` (optimizer role decoder)
    input_ids int64 [batch_size, sequence_length],
    past_key_self_{i} / past_value_self_{i} [batch_size, num_heads, past_sequence_length, head_dim],
    past_key_cross_{i} / past_value_cross_{i} [batch_size, num_heads, encoder_length, head_dim]
    -> logits [batch_size, sequence_length, vocab],
    -> present_key_self_{i} / present_value_self_{i}
       [batch_size, num_heads, total_sequence_length, head_dim]

num_heads / head_dim are the decoder's. There is no attention_mask or
position_ids input: genai 0.18 feeds the whisper decoder neither, so the
decoder numbers positions from the length of its self cache and attends
causally over it (decoder batches are never padded).

The module protocol (mobius/models/whisper.py implements it):

* ``audio_input_shape``: (num_mel_bins, num_frames) the encoder takes;
* ``encoder_length``: the encoder's output length (num_frames / 2);
* ``encode(op, audio_features)`` -> (encoder_hidden_states, [(cross key, cross value)]);
* ``decode(op, input_ids, past, cross)`` -> (logits, [(present key, present value)]),
  ``past`` and ``cross`` being per-layer (key, value) pairs.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn
from onnxscript._internal.builder import GraphBuilder

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.tasks.causal_lm import (BATCH, NAMED_DIMS, OPSET, PAST, SEQ, TOTAL, TaskFlags,
                                    output_value)
from mobius.tasks.concrete_dims import check_io_dims

AUDIO_FEATURES = "audio_features"
ENCODER_HIDDEN_STATES = "encoder_hidden_states"
#: %d-patterns, as genai_config spells them
CROSS_PRESENT_KEY, CROSS_PRESENT_VALUE = "present_key_cross_%d", "present_value_cross_%d"
CROSS_PAST_KEY, CROSS_PAST_VALUE = "past_key_cross_%d", "past_value_cross_%d"
SELF_PAST_KEY, SELF_PAST_VALUE = "past_key_self_%d", "past_value_self_%d"
SELF_PRESENT_KEY, SELF_PRESENT_VALUE = "present_key_self_%d", "present_value_self_%d"


def build_speech_seq2seq(module: nn.Module, config: ArchitectureConfig,
                         flags: TaskFlags = TaskFlags()) -> dict[str, ir.Model]:
    """Package key (<key>.onnx) -> graph; the builder optimizes each with its role."""
    return {"encoder": build_encoder(module, config, flags),
            "decoder": build_decoder(module, config, flags)}


def _graph() -> tuple[ir.Graph, GraphBuilder]:
    graph = ir.Graph([], [], nodes=[], opset_imports={"": OPSET}, name="main_graph")
    return graph, GraphBuilder(graph)


def _model(graph: ir.Graph, flags: TaskFlags) -> ir.Model:
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    if flags.use_concrete_dims:
        check_io_dims(model, NAMED_DIMS)
    return model


def _cross_shape(module: nn.Module, config: ArchitectureConfig) -> list:
    return [BATCH, config.num_attention_heads, module.encoder_length, config.head_dim]


def build_encoder(module: nn.Module, config: ArchitectureConfig,
                  flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = _graph()
    features = builder.input(AUDIO_FEATURES, dtype, [BATCH, *module.audio_input_shape])
    hidden, cross = module.encode(builder.op, features)
    output_value(builder, hidden, ENCODER_HIDDEN_STATES, dtype,
                 [BATCH, module.encoder_length, config.hidden_size])
    shape = _cross_shape(module, config)
    for i, (key, value) in enumerate(cross):
        output_value(builder, key, CROSS_PRESENT_KEY % i, dtype, shape)
        output_value(builder, value, CROSS_PRESENT_VALUE % i, dtype, shape)
    return _model(graph, flags)


def build_decoder(module: nn.Module, config: ArchitectureConfig,
                  flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = _graph()
    layers, heads, head_dim = config.num_hidden_layers, config.num_attention_heads, config.head_dim
    input_ids = builder.input("input_ids", ir.DataType.INT64, [BATCH, SEQ])
    past_shape = [BATCH, heads, PAST, head_dim]
    past = [(builder.input(SELF_PAST_KEY % i, dtype, past_shape),
             builder.input(SELF_PAST_VALUE % i, dtype, past_shape)) for i in range(layers)]
    cross_shape = _cross_shape(module, config)
    cross = [(builder.input(CROSS_PAST_KEY % i, dtype, cross_shape),
              builder.input(CROSS_PAST_VALUE % i, dtype, cross_shape)) for i in range(layers)]
    logits, presents = module.decode(builder.op, input_ids, past, cross)
    output_value(builder, logits, "logits", dtype, [BATCH, SEQ, config.vocab_size])
    present_shape = [BATCH, heads, TOTAL, head_dim]
    for i, (key, value) in enumerate(presents):
        output_value(builder, key, SELF_PRESENT_KEY % i, dtype, present_shape)
        output_value(builder, value, SELF_PRESENT_VALUE % i, dtype, present_shape)
    return _model(graph, flags)
