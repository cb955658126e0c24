"""text-generation: a causal LM with a dynamic KV cache, named as onnxruntime-genai expects.

Inputs: input_ids [batch, seq], attention_mask [batch, total_seq],
position_ids [batch, seq], past_key_values.{i}.key/.value
[batch, kv_heads, past_seq, head_dim]. Outputs: logits [batch, seq, vocab],
present.{i}.key/.value [batch, kv_heads, total_seq, head_dim].
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.package.genai_config import decoder_genai_config
from mobius.roles import DECODER
from mobius.tasks.concrete_dims import check_io_dims
from mobius.tasks.task import (GenaiContext, ModelIO, PackageConfigs, Reference, Task, TaskFlags,
                               TensorSpec, add_inputs, add_outputs, new_graph)

OPSET = 23
BATCH, SEQ, TOTAL, PAST = "batch_size", "sequence_length", "total_sequence_length", "past_sequence_length"
#: The only symbolic dims of the decoder's graph I/O (see TaskFlags.use_concrete_dims).
NAMED_DIMS = (BATCH, SEQ, TOTAL, PAST)
INT64 = ir.DataType.INT64


def position_streams(module: nn.Module) -> int:
    """How many position-id streams the module reads: 1 ([batch, seq]), or 3 for
    M-RoPE ([3, batch, seq]: temporal, height, width; mobius/components/mrope.py)."""
    return getattr(module, "position_streams", 1)


def decoder_io(config: ArchitectureConfig, inputs_embeds: bool = False,
               streams: int = 1) -> ModelIO:
    """The decoder contract; ``inputs_embeds`` replaces input_ids (TaskFlags.inputs_embeds);
    ``streams`` > 1 gives position_ids a leading [streams] axis (see position_streams)."""
    kv, head_dim = config.num_key_value_heads, config.head_dim
    first = (TensorSpec("inputs_embeds", None, (BATCH, SEQ, config.hidden_size)) if inputs_embeds
             else TensorSpec("input_ids", INT64, (BATCH, SEQ)))
    layers = range(config.num_hidden_layers)
    positions = (streams, BATCH, SEQ) if streams > 1 else (BATCH, SEQ)
    past = tuple(TensorSpec(f"past_key_values.{i}.{kind}", None, (BATCH, kv, PAST, head_dim))
                 for i in layers for kind in ("key", "value"))
    present = tuple(TensorSpec(f"present.{i}.{kind}", None, (BATCH, kv, TOTAL, head_dim))
                    for i in layers for kind in ("key", "value"))
    return ModelIO(
        inputs=(first, TensorSpec("attention_mask", INT64, (BATCH, TOTAL)),
                TensorSpec("position_ids", INT64, positions, optional=True), *past),
        outputs=(TensorSpec("logits", None, (BATCH, SEQ, config.vocab_size)), *present))


def build_causal_lm(module: nn.Module, config: ArchitectureConfig,
                    flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph(OPSET)
    io = decoder_io(config, flags.inputs_embeds, position_streams(module))
    inputs = add_inputs(builder, io.inputs, dtype)
    past = [(inputs[f"past_key_values.{i}.key"], inputs[f"past_key_values.{i}.value"])
            for i in range(config.num_hidden_layers)]
    embeds = {"inputs_embeds": inputs["inputs_embeds"]} if flags.inputs_embeds else {}
    logits, presents = module(builder.op, inputs.get("input_ids"), inputs["attention_mask"],
                              inputs["position_ids"], past, **embeds)
    outputs = {"logits": logits}
    for i, (key, value) in enumerate(presents):
        outputs[f"present.{i}.key"], outputs[f"present.{i}.value"] = key, value
    add_outputs(builder, outputs, io.outputs, dtype)
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    if flags.use_concrete_dims:
        check_io_dims(model, NAMED_DIMS)
    return model


def _genai_configs(module: nn.Module, config: ArchitectureConfig,
                   genai: GenaiContext) -> PackageConfigs:
    return PackageConfigs(decoder_genai_config(
        config, provider_options=genai.provider_options,
        past_present_share_buffer=genai.past_present_share_buffer))


TASK = Task(
    name="text-generation",
    summary="causal LM with a KV cache (onnxruntime-genai)",
    build=lambda module, config, flags: {"model": build_causal_lm(module, config, flags)},
    roles={"model": DECODER},
    io=lambda module, config: {"model": decoder_io(config, streams=position_streams(module))},
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForCausalLM", runner="greedy_decode",
                        inputs=("input_ids", "attention_mask", "position_ids"),
                        outputs=("logits",)),
    package_configs=_genai_configs,
    kv_cache_sized_by_context=True,
    takes_logits_to_keep=True,
)
