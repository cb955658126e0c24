"""automatic-speech-recognition with a CTC head (wav2vec 2.0, HuBERT): one graph.

Hugging Face tags these checkpoints ``automatic-speech-recognition``, like
Whisper (mobius/tasks/speech_seq2seq.py); the registry key adds ``-ctc``.

Inputs: ``input_values`` [batch_size, num_samples] (build dtype: the raw 16 kHz
waveform the checkpoint's feature extractor normalizes, preprocessor_config.json)
and, where the module takes one (``audio_inputs``), ``attention_mask`` int64
[batch_size, num_samples] (1 = real sample, right padding).
Output: ``logits`` [batch_size, num_frames, vocab] over the CTC vocabulary
(vocab.json; the blank is config.json's pad_token_id). Decoding (argmax, collapse
repeats, drop blanks) is the client's: transformers' Wav2Vec2Processor.batch_decode
does it (docs/examples/speech_recognition.py). The package carries the
checkpoint's preprocessor_config.json (mobius/tasks/audio_processor.py) beside
vocab.json; it is for plain onnxruntime (onnxruntime-genai has no CTC pipeline).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.roles import ENCODER
from mobius.tasks import audio_processor
from mobius.tasks.task import (ModelIO, Reference, Task, TensorSpec, add_inputs, add_outputs,
                               new_graph)
from mobius.tiny.ctc_processor import write_tiny_ctc_processor

BATCH, SAMPLES, FRAMES = "batch_size", "num_samples", "num_frames"
NAMED_DIMS = (BATCH, SAMPLES, FRAMES)


def ctc_io(module: nn.Module, config: ArchitectureConfig) -> ModelIO:
    inputs = (TensorSpec("input_values", None, (BATCH, SAMPLES)),)
    if "attention_mask" in module.audio_inputs:
        inputs += (TensorSpec("attention_mask", ir.DataType.INT64, (BATCH, SAMPLES)),)
    return ModelIO(inputs=inputs,
                   outputs=(TensorSpec("logits", None, (BATCH, FRAMES, config.vocab_size)),))


def build_ctc(module: nn.Module, config: ArchitectureConfig) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph()
    io = ctc_io(module, config)
    inputs = add_inputs(builder, io.inputs, dtype)
    logits = module(builder.op, *(inputs[name] for name in module.audio_inputs))
    add_outputs(builder, {"logits": logits}, io.outputs, dtype)
    return ir.Model(graph, ir_version=10, producer_name="mobius")


TASK = Task(
    name="automatic-speech-recognition-ctc",
    summary="CTC speech recognition: waveform -> per-frame logits (onnxruntime)",
    build=lambda module, config, flags: {"model": build_ctc(module, config)},
    roles={"model": ENCODER},
    io=lambda module, config: {"model": ctc_io(module, config)},
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForCTC", runner="ctc",
                        inputs=("input_values", "attention_mask"), outputs=("logits",)),
    read_extras=audio_processor.read_extras,
    processor_files=lambda module, config: audio_processor.processor_files(
        "attention_mask" in module.audio_inputs, config.raw),
    write_tiny_processor=write_tiny_ctc_processor,
)
