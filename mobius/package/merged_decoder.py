"""One encoder-decoder decoder for both steps: ``decoder_model_merged.onnx``.

transformers.js (and Optimum, where it finds one) runs an encoder-decoder as
``encoder_model.onnx`` plus a single decoder whose boolean ``use_cache_branch``
input picks the step: false on the first step, which is fed an empty past and
projects the cross K/V from ``encoder_hidden_states``; true on every later step,
which is fed both caches. The graph is an ``If`` on that input whose branches
are mobius' own first-step and with-past decoders (mobius/tasks/cross_kv_split.py,
named by mobius/package/optimum_layout.py), so both are exactly the graphs the
three-file form runs. The branches read the decoder's inputs and weights from
the outer graph: each weight is stored once, as an initializer of the merged
graph (the same bytes in both branches are one tensor).

The first-step branch reads no past, so the merged graph's past inputs leave the
head count, head size and length symbolic (whisper's cross cache has a fixed
length): a client feeds that step an empty past of its own sizing (Optimum:
[batch, heads, 0, hidden_size / heads], not t5's ``d_kv``; transformers.js: the
input's dims, a symbolic one as 0), which the step never reads.

The with-past branch returns empty ``present.{i}.encoder.*`` (an If's branches
return the same outputs): its clients keep the cross K/V they fed, as Optimum's
own merged decoders expect (transformers.js' getPastKeyValues), and the step
copies no cross cache.
"""

from __future__ import annotations

import hashlib

import numpy as np
import onnx_ir as ir

USE_CACHE_BRANCH = "use_cache_branch"
PAST = "past_key_values."
#: the three-file form's decoders (optimum_layout.SEQ2SEQ_FILES) and the merged one's name
FIRST_STEP, WITH_PAST, MERGED = "decoder_model", "decoder_with_past_model", "decoder_model_merged"


def merge_decoder_files(models: dict[str, ir.Model]) -> dict[str, ir.Model]:
    """Optimum-named encoder-decoder files with the two decoders merged into one."""
    merged = merge_decoders(models[FIRST_STEP], models[WITH_PAST])
    rest = {k: m for k, m in models.items() if k not in (FIRST_STEP, WITH_PAST)}
    return {**rest, MERGED: merged}


def merge_decoders(first: ir.Model, with_past: ir.Model) -> ir.Model:
    """The If-merged decoder of the first-step and with-past decoders (both consumed)."""
    first_graph, past_graph = first.graph, with_past.graph
    inputs = _outer_inputs(first_graph, past_graph)
    use_cache = ir.Value(name=USE_CACHE_BRANCH, type=ir.TensorType(ir.DataType.BOOL),
                         shape=ir.Shape([1]))
    weights = _SharedWeights()
    for graph in (past_graph, first_graph):
        _to_branch(graph, inputs, weights)
    _empty_cross_presents(past_graph, first_graph)
    outputs = [ir.Value(name=a.name, type=a.type, shape=_union_shape(a.shape, b.shape))
               for a, b in zip(first_graph.outputs, past_graph.outputs)]
    past_graph.name, first_graph.name = "with_past", "first_step"
    node = ir.Node("", "If", [use_cache], outputs=outputs, attributes=[
        ir.Attr("then_branch", ir.AttributeType.GRAPH, past_graph),
        ir.Attr("else_branch", ir.AttributeType.GRAPH, first_graph)])
    opsets = {**first_graph.opset_imports, **past_graph.opset_imports}
    graph = ir.Graph([*inputs.values(), use_cache], outputs, nodes=[node],
                     initializers=weights.values(), opset_imports=opsets, name="decoder")
    return ir.Model(graph, ir_version=max(first.ir_version, with_past.ir_version),
                    producer_name=with_past.producer_name,
                    producer_version=with_past.producer_version,
                    metadata_props=dict(with_past.metadata_props))


def _outer_inputs(first: ir.Graph, past: ir.Graph) -> dict[str, ir.Value]:
    """The merged graph's inputs: the first step's (its ids, masks, encoder_hidden_states),
    then the with-past decoder's others (its caches), each a fresh value."""
    inputs: dict[str, ir.Value] = {}
    for value in (*first.inputs, *past.inputs):
        if value.name not in inputs:
            dims = list(value.shape)
            if value.name.startswith(PAST) and len(dims) == 4:  # see the module's doc
                dims[1], dims[3] = "past_num_heads", "past_head_size"
                if not isinstance(dims[2], str):  # whisper's fixed encoder length
                    dims[2] = "encoder_sequence_length"
            inputs[value.name] = ir.Value(name=value.name, type=value.type,
                                          shape=ir.Shape(dims))
    return inputs


def _to_branch(graph: ir.Graph, inputs: dict[str, ir.Value], weights: _SharedWeights) -> None:
    """Makes ``graph`` an If branch: its inputs and weights become the outer graph's."""
    for value in list(graph.inputs):
        value.replace_all_uses_with(inputs[value.name], replace_graph_outputs=True)
    graph.inputs.clear()
    for name in list(graph.initializers):
        value = graph.initializers.pop(name)
        shared = weights.add(value)
        if shared is not value:
            value.replace_all_uses_with(shared, replace_graph_outputs=True)


def _empty_cross_presents(past: ir.Graph, first: ir.Graph) -> None:
    """Gives the with-past branch the first step's outputs, in its order: the cross
    presents it lacks as empty tensors."""
    own = {value.name: value for value in past.outputs}
    outputs = []
    for value in first.outputs:
        if value.name not in own:
            dims = [d if isinstance(d, int) else 0 for d in value.shape]
            empty = ir.tensor(np.zeros(dims, value.dtype.numpy()))
            node = ir.node("Constant", [], attributes={"value": empty})
            past.append(node)
            own[value.name] = node.outputs[0]
            own[value.name].name = value.name
            own[value.name].type, own[value.name].shape = value.type, ir.Shape(dims)
        outputs.append(own[value.name])
    past.outputs.clear()
    past.outputs.extend(outputs)


def _union_shape(a: ir.Shape | None, b: ir.Shape | None) -> ir.Shape | None:
    """The dims both branches' output agrees on; others left unnamed."""
    if a is None or b is None or len(a) != len(b):
        return None
    return ir.Shape([x if x == y else None for x, y in zip(a, b)])


class _SharedWeights:
    """The merged graph's initializers: one per distinct tensor (dtype, shape, bytes)."""

    def __init__(self):
        self._values: dict[str, ir.Value] = {}
        self._by_shape: dict[tuple, list[ir.Value]] = {}
        self._digests: dict[int, bytes] = {}

    def add(self, value: ir.Value) -> ir.Value:
        """``value``, or the same tensor already held (compared only where the dtype and
        shape agree: a tensor's bytes are read when another of its kind is held)."""
        kind = (value.dtype, tuple(value.shape))
        for held in self._by_shape.get(kind, ()):
            if held.const_value is value.const_value or self._digest(held) == self._digest(value):
                return held
        base, n = value.name, 1
        while value.name in self._values:
            value.name, n = f"{base}.{n}", n + 1
        self._values[value.name] = value
        self._by_shape.setdefault(kind, []).append(value)
        return value

    def values(self) -> list[ir.Value]:
        return list(self._values.values())

    def _digest(self, value: ir.Value) -> bytes:
        if id(value) not in self._digests:
            self._digests[id(value)] = hashlib.sha256(value.const_value.tobytes()).digest()
        return self._digests[id(value)]
