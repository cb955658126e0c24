"""text-generation: a causal LM with a dynamic KV cache, named as onnxruntime-genai expects.

Inputs: input_ids [batch, seq], attention_mask [batch, total_seq],
position_ids [batch, seq], past_key_values.{i}.key/.value
[batch, kv_heads, past_seq, head_dim]. Outputs: logits [batch, seq, vocab],
present.{i}.key/.value [batch, kv_heads, total_seq, head_dim].

The builder's client options may then limit the logits rows
(mobius/tasks/logits_to_keep.py): the genai layout's package ends with
logits [batch, 1, vocab] (each row's last real token) by default.

A hybrid's recurrent layers (the module's ``recurrent_states``: layer -> its
(name, dims after batch) tensors) carry fixed-size states instead of a KV cache:
past_key_values.{i}.{name} -> present.{i}.{name}, e.g. Mamba2's conv_state and
recurrent_state, which onnxruntime-genai finds by these names and zero-fills, or
LFM2's short-convolution ``conv`` [hidden, L_cache - 1], whose names the genai config
gives (past_conv_names / present_conv_names). The same map declares a layer's KV cache of
its own shape, key / value with dims (kv_heads, PAST, head_dim) (Gemma 4's global
layers), and a layer with no cache at all as () (Gemma 4's KV-sharing layers).
"""

from __future__ import annotations

from typing import Mapping

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


#: layer -> its recurrent state tensors: (name suffix, dims after the batch axis); a layer
#: that attends besides (Falcon-H1's parallel attention + Mamba2) lists KV_STATES first
RecurrentStates = Mapping[int, tuple[tuple[str, tuple[int, ...]], ...]]


#: key / value [kv_heads, past, head_dim] among a recurrent layer's states (dims None)
KV_STATES = (("key", None), ("value", None))


def recurrent_states(module: nn.Module) -> RecurrentStates:
    """The module's recurrent layers (none for a plain decoder)."""
    return getattr(module, "recurrent_states", None) or {}


def layer_state_names(config: ArchitectureConfig,
                      recurrent: RecurrentStates) -> list[tuple[str, ...]]:
    """Each layer's cached tensor names: key/value, or its recurrent states."""
    return [tuple(name for name, _ in recurrent[i]) if i in recurrent else ("key", "value")
            for i in range(config.num_hidden_layers)]


def position_streams(module: nn.Module) -> int:
    """How many position-id streams the module reads: 1 ([batch, seq]), or 3 for
    M-RoPE ([3, batch, seq]: temporal, height, width; mobius/components/mrope.py)."""
    return getattr(module, "position_streams", 1)


def embeds_width(module: nn.Module, config: ArchitectureConfig) -> int:
    """The last dim of inputs_embeds: the hidden size, or the module's own
    ``inputs_embeds_width`` (Qwen3-VL packs its deepstack features beside it)."""
    return getattr(module, "inputs_embeds_width", config.hidden_size)


def decoder_io(config: ArchitectureConfig, inputs_embeds: bool = False,
               token_ids: bool = False, recurrent: RecurrentStates | None = None,
               streams: int = 1, width: int | None = None) -> ModelIO:
    """The decoder contract; ``inputs_embeds`` replaces input_ids (TaskFlags.inputs_embeds);
    ``token_ids`` keeps input_ids beside it (a mask that depends on the tokens);
    ``recurrent``: a hybrid's state-carrying layers (see the module docstring);
    ``streams`` > 1 gives position_ids a leading [streams] axis (see position_streams);
    ``width``: inputs_embeds' last dim (default hidden_size; see embeds_width)."""
    kv, head_dim = config.num_key_value_heads, config.head_dim
    ids = TensorSpec("input_ids", INT64, (BATCH, SEQ))
    first = ((TensorSpec("inputs_embeds", None, (BATCH, SEQ, width or config.hidden_size)),
              *((ids,) if token_ids else ())) if inputs_embeds else (ids,))
    positions = (streams, BATCH, SEQ) if streams > 1 else (BATCH, SEQ)
    recurrent = recurrent or {}
    past, present = [], []
    for i in range(config.num_hidden_layers):
        for name, dims in recurrent.get(i, ()):
            if dims is None:  # a layer that also attends: its key / value cache
                dims = (kv, PAST, head_dim)
            # a cache of the layer's own shape (Gemma 4's global layers) grows like the KV cache
            total = tuple(TOTAL if d == PAST else d for d in dims)
            past.append(TensorSpec(f"past_key_values.{i}.{name}", None, (BATCH, *dims)))
            present.append(TensorSpec(f"present.{i}.{name}", None, (BATCH, *total)))
        if i not in recurrent:
            for kind in ("key", "value"):
                past.append(TensorSpec(f"past_key_values.{i}.{kind}", None,
                                       (BATCH, kv, PAST, head_dim)))
                present.append(TensorSpec(f"present.{i}.{kind}", None,
                                          (BATCH, kv, TOTAL, head_dim)))
    return ModelIO(
        inputs=(*first, TensorSpec("attention_mask", INT64, (BATCH, TOTAL)),
                TensorSpec("position_ids", INT64, positions, optional=True), *past),
        outputs=(TensorSpec("logits", None, (BATCH, SEQ, config.vocab_size)), *present))


def build_causal_lm(module: nn.Module, config: ArchitectureConfig,
                    flags: TaskFlags = TaskFlags(), token_ids: bool = False) -> ir.Model:
    dtype = get_build_dtype()
    graph, builder = new_graph(OPSET)
    recurrent = recurrent_states(module)
    io = decoder_io(config, flags.inputs_embeds, token_ids, recurrent, position_streams(module),
                    embeds_width(module, config))
    inputs = add_inputs(builder, io.inputs, dtype)
    names = layer_state_names(config, recurrent)
    past = [tuple(inputs[f"past_key_values.{i}.{n}"] for n in layer)
            for i, layer in enumerate(names)]
    embeds = {"inputs_embeds": inputs["inputs_embeds"]} if flags.inputs_embeds else {}
    logits, presents = module(builder.op, inputs.get("input_ids"), inputs["attention_mask"],
                              inputs["position_ids"], past, **embeds)
    outputs = {"logits": logits}
    for i, (layer, values) in enumerate(zip(names, presents)):
        outputs.update({f"present.{i}.{n}": v for n, v in zip(layer, values)})
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
    convs = {i: dims for i, layer in recurrent_states(module).items()
             for name, dims in layer if name == "conv"}
    if convs:
        add_conv_states(genai_config, config, convs)
    return PackageConfigs(genai_config)


def add_conv_states(genai_config: dict, config: ArchitectureConfig,
                    states: Mapping[int, tuple[int, ...]]) -> None:
    """What genai's conv state cache reads (LFM2's short convolutions, a recurrent state
    named ``conv`` [channels, width]): each layer's kind, the state names and width."""
    widths = {dims[-1] for dims in states.values()}
    if len(widths) != 1:
        raise ValueError(f"conv states of different widths {sorted(widths)}: genai holds one")
    decoder = genai_config["model"]["decoder"]
    decoder["inputs"]["past_conv_names"] = "past_key_values.%d.conv"
    decoder["outputs"]["present_conv_names"] = "present.%d.conv"
    decoder["layer_types"] = ["conv" if i in states else "full_attention"
                              for i in range(config.num_hidden_layers)]
    decoder["conv_cache_size"] = widths.pop()


TASK = Task(
    name="text-generation",
    summary="causal LM with a KV cache (onnxruntime-genai)",
    build=lambda module, config, flags: {"model": build_causal_lm(module, config, flags)},
    roles={"model": DECODER},
    io=lambda module, config: {"model": decoder_io(config, recurrent=recurrent_states(module),
                                                   streams=position_streams(module))},
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForCausalLM", runner="greedy_decode",
                        inputs=("input_ids", "attention_mask", "position_ids"),
                        outputs=("logits",)),
    package_configs=_genai_configs,
    token_ids=("bos_token_id", "eos_token_id", "pad_token_id"),  # genai_config.json
    kv_cache_sized_by_context=True,
    takes_logits_to_keep=True,
)
