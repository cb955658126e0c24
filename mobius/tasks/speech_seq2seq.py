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
* ``encode(op, audio_features)`` -> encoder_hidden_states;
* ``cross_key_values(op, encoder_hidden_states)`` -> [(cross key, cross value)];
* ``decode(op, input_ids, past, cross)`` -> (logits, [(present key, present value)]),
  ``past`` and ``cross`` being per-layer (key, value) pairs.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.package.genai_config import whisper_audio_processor_config, whisper_genai_config
from mobius.roles import DECODER, ENCODER
from mobius.tasks.causal_lm import BATCH, NAMED_DIMS, PAST, SEQ, TOTAL
from mobius.tasks.concrete_dims import check_io_dims
from mobius.tasks.cross_kv_split import (ENCODER_HIDDEN_STATES, FIRST_STEP, build_first_step,
                                         split_io)
from mobius.tasks.task import (GenaiContext, ModelIO, PackageConfigs, Reference, Task, TaskFlags,
                               TensorSpec, add_inputs, add_outputs, new_graph)

AUDIO_FEATURES = "audio_features"
#: %d-patterns, as genai_config spells them
CROSS_PRESENT_KEY, CROSS_PRESENT_VALUE = "present_key_cross_%d", "present_value_cross_%d"
CROSS_PAST_KEY, CROSS_PAST_VALUE = "past_key_cross_%d", "past_value_cross_%d"
SELF_PAST_KEY, SELF_PAST_VALUE = "past_key_self_%d", "past_value_self_%d"
SELF_PRESENT_KEY, SELF_PRESENT_VALUE = "present_key_self_%d", "present_value_self_%d"


def _kv(patterns: tuple[str, str], layers: int, dims: tuple) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(p % i, None, dims) for i in range(layers) for p in patterns)


def speech_seq2seq_io(module: nn.Module, config: ArchitectureConfig) -> dict[str, ModelIO]:
    layers, heads, head_dim = config.num_hidden_layers, config.num_attention_heads, config.head_dim
    cross = (BATCH, heads, module.encoder_length, head_dim)
    return {
        "encoder": ModelIO(
            inputs=(TensorSpec(AUDIO_FEATURES, None, (BATCH, *module.audio_input_shape)),),
            outputs=(TensorSpec(ENCODER_HIDDEN_STATES, None,
                                (BATCH, module.encoder_length, config.hidden_size)),
                     *_kv((CROSS_PRESENT_KEY, CROSS_PRESENT_VALUE), layers, cross))),
        "decoder": ModelIO(
            inputs=(TensorSpec("input_ids", ir.DataType.INT64, (BATCH, SEQ)),
                    *_kv((SELF_PAST_KEY, SELF_PAST_VALUE), layers, (BATCH, heads, PAST, head_dim)),
                    *_kv((CROSS_PAST_KEY, CROSS_PAST_VALUE), layers, cross)),
            outputs=(TensorSpec("logits", None, (BATCH, SEQ, config.vocab_size)),
                     *_kv((SELF_PRESENT_KEY, SELF_PRESENT_VALUE), layers,
                          (BATCH, heads, TOTAL, head_dim)))),
    }


def build_speech_seq2seq(module: nn.Module, config: ArchitectureConfig,
                         flags: TaskFlags = TaskFlags()) -> dict[str, ir.Model]:
    """Package key (<key>.onnx) -> graph; the builder optimizes each with its role
    (with ``flags.cross_kv_in_decoder``, mobius/tasks/cross_kv_split.py's three)."""
    if not flags.cross_kv_in_decoder:
        io = speech_seq2seq_io(module, config)
        return {"encoder": build_encoder(module, config, io["encoder"], flags),
                "decoder": build_decoder(module, config, io["decoder"], flags)}
    io = split_io(speech_seq2seq_io(module, config))
    decoder = build_decoder(module, config, io["decoder"], flags)  # first: see build_first_step
    first = build_first_step(
        module, config, io[FIRST_STEP],
        lambda op, inputs, past, cross: module.decode(op, inputs["input_ids"], past, cross),
        (CROSS_PRESENT_KEY, CROSS_PRESENT_VALUE))
    return {"encoder": build_encoder(module, config, io["encoder"], flags),
            FIRST_STEP: _model(first, flags), "decoder": decoder}


def _model(graph: ir.Graph, flags: TaskFlags) -> ir.Model:
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    if flags.use_concrete_dims:
        check_io_dims(model, NAMED_DIMS)
    return model


def _pairs(values: dict, key: str, value: str, layers: int) -> list:
    return [(values[key % i], values[value % i]) for i in range(layers)]


def build_encoder(module: nn.Module, config: ArchitectureConfig, io: ModelIO,
                  flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    inputs = add_inputs(builder, io.inputs, dtype)
    hidden = module.encode(builder.op, inputs[AUDIO_FEATURES])
    outputs = {ENCODER_HIDDEN_STATES: hidden}
    if len(io.outputs) > 1:  # not the cross_kv_in_decoder split's encoder
        for i, (key, value) in enumerate(module.cross_key_values(builder.op, hidden)):
            outputs[CROSS_PRESENT_KEY % i], outputs[CROSS_PRESENT_VALUE % i] = key, value
    add_outputs(builder, outputs, io.outputs, dtype)
    return _model(graph, flags)


def build_decoder(module: nn.Module, config: ArchitectureConfig, io: ModelIO,
                  flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    layers = config.num_hidden_layers
    inputs = add_inputs(builder, io.inputs, dtype)
    past = _pairs(inputs, SELF_PAST_KEY, SELF_PAST_VALUE, layers)
    cross = _pairs(inputs, CROSS_PAST_KEY, CROSS_PAST_VALUE, layers)
    logits, presents = module.decode(builder.op, inputs["input_ids"], past, cross)
    outputs = {"logits": logits}
    for i, (key, value) in enumerate(presents):
        outputs[SELF_PRESENT_KEY % i], outputs[SELF_PRESENT_VALUE % i] = key, value
    add_outputs(builder, outputs, io.outputs, dtype)
    return _model(graph, flags)


def _genai_configs(module: nn.Module, config: ArchitectureConfig,
                   genai: GenaiContext) -> PackageConfigs:
    encoder = module.encoder_config
    return PackageConfigs(
        whisper_genai_config(config, encoder, provider_options=genai.provider_options,
                             past_present_share_buffer=genai.past_present_share_buffer),
        {"audio_processor_config.json": whisper_audio_processor_config(encoder.num_mel_bins)})


TASK = Task(
    name="automatic-speech-recognition",
    summary="audio encoder + decoder with self/cross KV cache (onnxruntime-genai)",
    build=build_speech_seq2seq,
    roles={"encoder": ENCODER, "decoder": DECODER, FIRST_STEP: DECODER},
    io=speech_seq2seq_io,
    cross_kv_in_decoder_io=lambda module, config: split_io(speech_seq2seq_io(module, config)),
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForSpeechSeq2Seq", runner="speech_seq2seq",
                        inputs=("input_features", "decoder_input_ids"), outputs=("logits",)),
    package_configs=_genai_configs,
    token_ids=("bos_token_id", "eos_token_id", "pad_token_id"),  # genai_config.json
)
