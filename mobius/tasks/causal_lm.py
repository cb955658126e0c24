"""text-generation: a causal LM with a dynamic KV cache, named as onnxruntime-genai expects.

Inputs: input_ids [batch, seq], attention_mask [batch, total_seq],
position_ids [batch, seq], past_key_values.{i}.key/.value
[batch, kv_heads, past_seq, head_dim]. Outputs: logits [batch, seq, vocab],
present.{i}.key/.value [batch, kv_heads, total_seq, head_dim].

A hybrid model (LFM2's short convolutions) names the layers that carry a
recurrent state instead of a KV cache in its ``conv_state_shapes`` attribute
(layer -> per-row state shape, [channels, width]): those layers take
``past.{i}.conv`` [batch, channels, width] and return ``present.{i}.conv``,
the names and layout onnxruntime-genai's conv state cache binds.
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


def conv_state_shapes(module: nn.Module) -> dict[int, tuple[int, int]]:
    """Layer -> [channels, width] of the layers carrying a conv state (none by default)."""
    return dict(getattr(module, "conv_state_shapes", None) or {})


def cache_names(config: ArchitectureConfig, states: dict[int, tuple[int, int]]
                ) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """Per layer: (its past input names, its present output names)."""
    return [((f"past.{i}.conv",), (f"present.{i}.conv",)) if i in states
            else ((f"past_key_values.{i}.key", f"past_key_values.{i}.value"),
                  (f"present.{i}.key", f"present.{i}.value"))
            for i in range(config.num_hidden_layers)]


def decoder_io(config: ArchitectureConfig, inputs_embeds: bool = False,
               states: dict[int, tuple[int, int]] | None = None) -> ModelIO:
    """The decoder contract; ``inputs_embeds`` replaces input_ids (TaskFlags.inputs_embeds);
    ``states``: the conv-state layers (see the module docstring)."""
    kv, head_dim, states = config.num_key_value_heads, config.head_dim, states or {}
    first = (TensorSpec("inputs_embeds", None, (BATCH, SEQ, config.hidden_size)) if inputs_embeds
             else TensorSpec("input_ids", INT64, (BATCH, SEQ)))
    past, present = [], []
    for i, (past_names, present_names) in enumerate(cache_names(config, states)):
        past_shape = (BATCH, *states[i]) if i in states else (BATCH, kv, PAST, head_dim)
        present_shape = (BATCH, *states[i]) if i in states else (BATCH, kv, TOTAL, head_dim)
        past += [TensorSpec(name, None, past_shape) for name in past_names]
        present += [TensorSpec(name, None, present_shape) for name in present_names]
    return ModelIO(
        inputs=(first, TensorSpec("attention_mask", INT64, (BATCH, TOTAL)),
                TensorSpec("position_ids", INT64, (BATCH, SEQ), optional=True), *past),
        outputs=(TensorSpec("logits", None, (BATCH, SEQ, config.vocab_size)), *present))


def build_causal_lm(module: nn.Module, config: ArchitectureConfig,
                    flags: TaskFlags = TaskFlags()) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph(OPSET)
    states = conv_state_shapes(module)
    io = decoder_io(config, flags.inputs_embeds, states)
    inputs = add_inputs(builder, io.inputs, dtype)
    names = cache_names(config, states)
    past = [tuple(inputs[name] for name in past_names) for past_names, _ in names]
    embeds = {"inputs_embeds": inputs["inputs_embeds"]} if flags.inputs_embeds else {}
    logits, presents = module(builder.op, inputs.get("input_ids"), inputs["attention_mask"],
                              inputs["position_ids"], past, **embeds)
    outputs = {"logits": logits}
    for (_, present_names), values in zip(names, presents):
        outputs.update(zip(present_names, values))
    add_outputs(builder, outputs, io.outputs, dtype)
    model = ir.Model(graph, ir_version=10, producer_name="mobius")
    if flags.use_concrete_dims:
        check_io_dims(model, NAMED_DIMS)
    return model


def _genai_configs(module: nn.Module, config: ArchitectureConfig,
                   genai: GenaiContext) -> PackageConfigs:
    genai_config = decoder_genai_config(
        config, provider_options=genai.provider_options,
        past_present_share_buffer=genai.past_present_share_buffer)
    states = conv_state_shapes(module)
    if states:
        add_conv_states(genai_config, config, states)
    return PackageConfigs(genai_config)


def add_conv_states(genai_config: dict, config: ArchitectureConfig,
                    states: dict[int, tuple[int, int]]) -> None:
    """What genai's conv state cache reads: each layer's kind, the state names and width."""
    widths = {width for _, width in states.values()}
    if len(widths) != 1:
        raise ValueError(f"conv states of different widths {sorted(widths)}: genai holds one")
    decoder = genai_config["model"]["decoder"]
    decoder["inputs"]["past_conv_names"] = "past.%d.conv"
    decoder["outputs"]["present_conv_names"] = "present.%d.conv"
    decoder["layer_types"] = ["conv" if i in states else "full_attention"
                              for i in range(config.num_hidden_layers)]
    decoder["conv_cache_size"] = widths.pop()


TASK = Task(
    name="text-generation",
    summary="causal LM with a KV cache (onnxruntime-genai)",
    build=lambda module, config, flags: {"model": build_causal_lm(module, config, flags)},
    roles={"model": DECODER},
    io=lambda module, config: {"model": decoder_io(config, states=conv_state_shapes(module))},
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForCausalLM", runner="greedy_decode",
                        inputs=("input_ids", "attention_mask", "position_ids"),
                        outputs=("logits",)),
    package_configs=_genai_configs,
    kv_cache_sized_by_context=True,
    takes_logits_to_keep=True,
)
