"""The encoder-decoder split with the cross-attention K/V projected in the decoder
(TaskFlags.cross_kv_in_decoder), shared by text2text and speech_seq2seq.

mobius' own split projects the cross K/V once in the encoder (genai's contract).
Optimum's classes run an encoder that returns its hidden states only, then a
first-step decoder that takes them, projects the cross K/V itself and returns them
with its self presents, then a decoder with past for every later step (fed both
caches). This module derives that contract from the task's own:

``encoder``
    the task's encoder inputs -> encoder_hidden_states
``first_step`` (optimizer role decoder)
    the decoder's inputs less its past, + encoder_hidden_states
    -> the decoder's outputs, + the encoder's present_key_cross_{i} / present_value_cross_{i}
``decoder``
    unchanged

The module protocol adds ``cross_key_values(op, encoder_hidden_states)`` -> [(cross key,
cross value) per decoder layer] (mobius/models/t5.py, bart.py, whisper.py).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.config.architecture import ArchitectureConfig
from mobius.context import get_build_dtype
from mobius.tasks.task import ModelIO, TensorSpec, add_inputs, add_outputs, new_graph
from mobius.weights.dtypes import numpy_dtype

FIRST_STEP = "first_step"
ENCODER_HIDDEN_STATES = "encoder_hidden_states"
#: (op, graph inputs by name, past, cross) -> (logits, [(present key, present value)])
Decode = Callable[..., tuple]


def split_io(io: dict[str, ModelIO]) -> dict[str, ModelIO]:
    """The task's {encoder, decoder} contract as {encoder, first_step, decoder}."""
    encoder, decoder = io["encoder"], io["decoder"]
    hidden = next(s for s in encoder.outputs if s.name == ENCODER_HIDDEN_STATES)
    cross = tuple(s for s in encoder.outputs if s.name != ENCODER_HIDDEN_STATES)
    first_inputs = tuple(s for s in decoder.inputs if not s.name.startswith("past_"))
    return {"encoder": ModelIO(encoder.inputs, (hidden,)),
            FIRST_STEP: ModelIO((*first_inputs, hidden), (*decoder.outputs, *cross)),
            "decoder": decoder}


def build_first_step(module: nn.Module, config: ArchitectureConfig, io: ModelIO,
                     decode: Decode, cross_names: tuple[str, str]) -> ir.Graph:
    """The first-step decoder's graph (built after the with-past decoder's): cross K/V
    from encoder_hidden_states, an empty self cache, the task's ``decode``; its outputs
    named by ``io`` (self presents after logits, then the cross K/V as ``cross_names`` %
    layer)."""
    dtype = get_build_dtype()
    graph, builder = new_graph()
    op = builder.op
    inputs = add_inputs(builder, io.inputs, dtype)
    cross = module.cross_key_values(op, inputs[ENCODER_HIDDEN_STATES])
    past = [_empty_cache(op, inputs["input_ids"], config)] * config.num_hidden_layers
    logits, presents = decode(op, inputs, past, cross)
    self_names = [s.name for s in io.outputs[1:1 + 2 * len(presents)]]
    outputs = {"logits": logits, **dict(zip(self_names, [t for kv in presents for t in kv]))}
    for i, (key, value) in enumerate(cross):
        outputs[cross_names[0] % i], outputs[cross_names[1] % i] = key, value
    add_outputs(builder, outputs, io.outputs, dtype)
    _own_initializers(graph)
    return graph


def _own_initializers(graph: ir.Graph) -> None:
    """The decoder's weights, first registered in the with-past decoder's graph (a
    parameter joins the first graph that reads it): this graph's own initializers,
    the same tensors."""
    owned: dict[ir.Value, ir.Value] = {}
    for node in graph:
        for index, value in enumerate(node.inputs):
            if value is None or not value.is_initializer() or value.graph is graph:
                continue
            if value not in owned:
                owned[value] = ir.Value(name=value.name, shape=value.shape, type=value.type,
                                        const_value=value.const_value)
                graph.register_initializer(owned[value])
            node.replace_input_with(index, owned[value])


def _empty_cache(op, input_ids, config: ArchitectureConfig) -> tuple:
    """A zero-length self K/V pair [batch, heads, 0, head_dim]: the first step's past."""
    dims = op.Concat(op.Shape(input_ids, start=0, end=1),
                     op.Constant(value_ints=[config.num_attention_heads, 0, config.head_dim]),
                     axis=0)
    empty = op.ConstantOfShape(dims, value=ir.tensor(np.zeros(1, numpy_dtype(get_build_dtype()))))
    return empty, empty
