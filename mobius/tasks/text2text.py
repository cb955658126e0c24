"""Text-to-text generation with an encoder-decoder (T5, mT5, BART, Marian): two models, with the
same cache names and the same split as the whisper task (mobius/tasks/speech_seq2seq.py).

``encoder`` (optimizer role encoder)
    input_ids, attention_mask int64 [batch_size, encoder_sequence_length]
    -> encoder_hidden_states [batch_size, encoder_sequence_length, hidden]
    -> present_key_cross_{i} / present_value_cross_{i}
       [batch_size, num_heads, encoder_sequence_length, head_dim], one pair per *decoder*
       layer: the cross-attention K/V depend on the source only, so they are projected
       once per input, not at every decoding step.
``decoder`` (optimizer role decoder)
    input_ids int64 [batch_size, sequence_length],
    encoder_attention_mask int64 [batch_size, encoder_sequence_length] (the encoder's
    attention_mask: padded source tokens are masked in cross-attention),
    past_key_self_{i} / past_value_self_{i} [batch_size, num_heads, past_sequence_length, head_dim],
    past_key_cross_{i} / past_value_cross_{i} (the encoder's presents, fed unchanged)
    -> logits [batch_size, sequence_length, vocab],
    -> present_key_self_{i} / present_value_self_{i}
       [batch_size, num_heads, total_sequence_length, head_dim]

The decoder has no attention_mask of its own: greedy or beam decoding starts every
row from ``decoder_start_token_id``, so decoder batches are never padded; positions
and the causal mask come from the self cache's length. onnxruntime-genai 0.18 runs
no text encoder-decoder (its seq2seq types are whisper and Marian-NMT's SSRU), so the
package is for plain onnxruntime (docs/examples/text2text.py drives it); the decoder's
metadata carries the token ids a generation loop needs.

The module protocol (mobius/models/t5.py and bart.py implement it): ``encode(op, input_ids,
attention_mask)`` -> encoder_hidden_states, ``cross_key_values(op, encoder_hidden_states)``
-> [(cross key, cross value)] and
``decode(op, input_ids, encoder_attention_mask, past, cross)`` -> (logits, [(present
key, present value)]); ``config.head_dim`` / ``num_attention_heads`` /
``num_hidden_layers`` are the decoder's.
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.roles import DECODER, ENCODER
from mobius.tasks.causal_lm import BATCH, NAMED_DIMS, PAST, SEQ, TOTAL
from mobius.tasks.concrete_dims import check_io_dims
from mobius.tasks.cross_kv_split import FIRST_STEP, build_first_step, split_io
from mobius.tasks.speech_seq2seq import (CROSS_PAST_KEY, CROSS_PAST_VALUE, CROSS_PRESENT_KEY,
                                         CROSS_PRESENT_VALUE, ENCODER_HIDDEN_STATES, SELF_PAST_KEY,
                                         SELF_PAST_VALUE, SELF_PRESENT_KEY, SELF_PRESENT_VALUE)
from mobius.tasks.task import (ModelIO, Reference, Task, TaskFlags, TensorSpec, add_inputs,
                               add_outputs, new_graph)

ENCODER_SEQ = "encoder_sequence_length"
ENCODER_ATTENTION_MASK = "encoder_attention_mask"
TEXT2TEXT_DIMS = (*NAMED_DIMS, ENCODER_SEQ)
INT64 = ir.DataType.INT64


def _kv(patterns: tuple[str, str], layers: int, dims: tuple) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(p % i, None, dims) for i in range(layers) for p in patterns)


def text2text_io(module: nn.Module, config: ArchitectureConfig) -> dict[str, ModelIO]:
    layers, heads, head_dim = config.num_hidden_layers, config.num_attention_heads, config.head_dim
    cross = (BATCH, heads, ENCODER_SEQ, head_dim)
    return {
        "encoder": ModelIO(
            inputs=(TensorSpec("input_ids", INT64, (BATCH, ENCODER_SEQ)),
                    TensorSpec("attention_mask", INT64, (BATCH, ENCODER_SEQ))),
            outputs=(TensorSpec(ENCODER_HIDDEN_STATES, None,
                                (BATCH, ENCODER_SEQ, config.hidden_size)),
                     *_kv((CROSS_PRESENT_KEY, CROSS_PRESENT_VALUE), layers, cross))),
        "decoder": ModelIO(
            inputs=(TensorSpec("input_ids", INT64, (BATCH, SEQ)),
                    TensorSpec(ENCODER_ATTENTION_MASK, INT64, (BATCH, ENCODER_SEQ)),
                    *_kv((SELF_PAST_KEY, SELF_PAST_VALUE), layers, (BATCH, heads, PAST, head_dim)),
                    *_kv((CROSS_PAST_KEY, CROSS_PAST_VALUE), layers, cross)),
            outputs=(TensorSpec("logits", None, (BATCH, SEQ, config.vocab_size)),
                     *_kv((SELF_PRESENT_KEY, SELF_PRESENT_VALUE), layers,
                          (BATCH, heads, TOTAL, head_dim)))),
    }


def build_text2text(module: nn.Module, config: ArchitectureConfig,
                    flags: TaskFlags = TaskFlags()) -> dict[str, ir.Model]:
    """Package key (<key>.onnx) -> graph; the builder optimizes each with its role
    (with ``flags.cross_kv_in_decoder``, mobius/tasks/cross_kv_split.py's three)."""
    if not flags.cross_kv_in_decoder:
        io = text2text_io(module, config)
        return {"encoder": _build_encoder(module, io["encoder"], flags),
                "decoder": _build_decoder(module, config, io["decoder"], flags)}
    io = split_io(text2text_io(module, config))
    decoder = _build_decoder(module, config, io["decoder"], flags)  # first: see build_first_step
    first = build_first_step(
        module, config, io[FIRST_STEP],
        lambda op, inputs, past, cross: module.decode(
            op, inputs["input_ids"], inputs[ENCODER_ATTENTION_MASK], past, cross),
        (CROSS_PRESENT_KEY, CROSS_PRESENT_VALUE))
    return {"encoder": _build_encoder(module, io["encoder"], flags),
            FIRST_STEP: _model(first, flags), "decoder": decoder}


def _model(graph: ir.Graph, flags: TaskFlags) -> ir.Model:
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    if flags.use_concrete_dims:
        check_io_dims(model, TEXT2TEXT_DIMS)
    return model


def _build_encoder(module: nn.Module, io: ModelIO, flags: TaskFlags) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    inputs = add_inputs(builder, io.inputs, dtype)
    hidden = module.encode(builder.op, inputs["input_ids"], inputs["attention_mask"])
    outputs = {ENCODER_HIDDEN_STATES: hidden}
    if len(io.outputs) > 1:  # not the cross_kv_in_decoder split's encoder
        for i, (key, value) in enumerate(module.cross_key_values(builder.op, hidden)):
            outputs[CROSS_PRESENT_KEY % i], outputs[CROSS_PRESENT_VALUE % i] = key, value
    add_outputs(builder, outputs, io.outputs, dtype)
    return _model(graph, flags)


def _build_decoder(module: nn.Module, config: ArchitectureConfig, io: ModelIO,
                   flags: TaskFlags) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    inputs = add_inputs(builder, io.inputs, dtype)
    layers = range(config.num_hidden_layers)
    past = [(inputs[SELF_PAST_KEY % i], inputs[SELF_PAST_VALUE % i]) for i in layers]
    cross = [(inputs[CROSS_PAST_KEY % i], inputs[CROSS_PAST_VALUE % i]) for i in layers]
    logits, presents = module.decode(builder.op, inputs["input_ids"],
                                     inputs[ENCODER_ATTENTION_MASK], past, cross)
    outputs = {"logits": logits}
    for i, (key, value) in enumerate(presents):
        outputs[SELF_PRESENT_KEY % i], outputs[SELF_PRESENT_VALUE % i] = key, value
    add_outputs(builder, outputs, io.outputs, dtype)
    return _model(graph, flags)


def _metadata(config: ArchitectureConfig) -> dict[str, str]:
    """The token ids a generation loop needs (plain onnxruntime has no genai_config)."""
    raw = config.raw
    start = raw.get("decoder_start_token_id")
    return {"decoder_start_token_id": str(config.pad_token_id if start is None else start),
            "eos_token_id": ",".join(str(t) for t in config.eos_token_id),
            "pad_token_id": str(config.pad_token_id)}


TASK = Task(
    name="text2text-generation",
    summary="text encoder + decoder with self/cross KV cache (plain onnxruntime)",
    build=build_text2text,
    token_ids=("eos_token_id", "pad_token_id"),  # the models' metadata
    roles={"encoder": ENCODER, "decoder": DECODER, FIRST_STEP: DECODER},
    io=text2text_io,
    cross_kv_in_decoder_io=lambda module, config: split_io(text2text_io(module, config)),
    named_dims=TEXT2TEXT_DIMS,
    reference=Reference(auto_class="AutoModelForSeq2SeqLM", runner="text2text",
                        inputs=("input_ids", "attention_mask", "decoder_input_ids"),
                        outputs=("encoder_hidden_states", "logits")),
    metadata=_metadata,
)
