"""``num_logits_to_keep``: a decoder input that limits logits to the last k positions.

A prompt of S tokens makes [batch, S, vocab] logits, of which generation reads
only the last row (S=2,000 with a 128k vocabulary is ~1 GiB of float32). With
this input the hidden states are sliced to their last k positions before the
LM head: k=1 while generating, 0 for every position (Slice from -0 = 0).
transformers.js feeds it when a decoder has it (1 while generating, 0 on a
plain forward). onnxruntime-genai 0.18 does not feed it; it runs a graph whose
logits are [batch, 1, vocab] with a static 1 instead (a "pruned" model), which
:func:`keep_last_logits` makes: the genai layout's default.

Everything this needs is in the finished graph (the LM head and what follows
it up to the ``logits`` output), so it is applied after the pipeline.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from mobius.errors import MobiusError
from mobius.rewrite.graph_inputs import graph_input

INPUT = "num_logits_to_keep"
#: ``prefill_logits`` choices: the last position only (keep_last_logits), or every one
LAST, ALL = "last", "all"
PREFILL_LOGITS = (LAST, ALL)
#: the logits output's sequence dim: k, or the sequence length when k is 0
LOGITS_DIM = "logits_sequence_length"
_LM_HEADS = {("", "MatMul"), ("", "Gemm"), ("com.microsoft", "MatMulNBits"),
             ("com.microsoft", "FusedMatMul")}
#: per-position ops that may follow the LM head (soft-capping, scaling, casts)
_PER_POSITION = {("", op) for op in ("Mul", "Div", "Add", "Tanh", "Cast", "Identity")}


def add_logits_to_keep(model: ir.Model, index_dtype: ir.DataType = ir.DataType.INT64) -> None:
    """Adds the scalar input ``num_logits_to_keep`` (``index_dtype``) to a decoder graph."""
    graph = model.graph
    keep = ir.Value(name=INPUT, type=ir.TensorType(index_dtype), shape=ir.Shape([]))
    graph.inputs.append(keep)
    np_dtype = np.int64 if index_dtype == ir.DataType.INT64 else np.int32

    def last_k(hidden: ir.Value) -> list[ir.Node]:
        negated = ir.Node("", "Neg", [keep])
        start = ir.Node("", "Reshape", [negated.outputs[0], _const(graph, [1], np.int64)])
        cut = ir.Node("", "Slice", [hidden, start.outputs[0],
                                    _const(graph, [np.iinfo(np_dtype).max], np_dtype),
                                    _const(graph, [1], np_dtype)])
        return [negated, start, cut]

    _limit_before_head(graph, last_k, LOGITS_DIM)


def keep_last_logits(model: ir.Model) -> None:
    """Limits a decoder's logits to each row's last real token: [batch, 1, vocab], 1 static.

    onnxruntime-genai reads a static 1 there as a pruned model and samples from
    that row as it is (its IsPruned check on the decoder's logits output), so
    the graph picks the row itself: the last position of the chunk whose
    attention_mask is 1. That is the last column for a left-padded batch
    (transformers' convention) and the last prompt token of a shorter row in
    the right-padded batch genai feeds. The prompt then costs the LM head one
    row instead of one per token. A prompt's logits at every position
    (perplexity, genai's n-gram / speculative decoding) need the full form.
    """
    graph = model.graph
    mask, ids = graph_input(graph, "attention_mask"), graph_input(graph, "input_ids")
    if mask is None or ids is None:
        raise MobiusError("last-position logits need the attention_mask and input_ids inputs")
    _limit_before_head(graph, lambda hidden: _last_real_token(graph, hidden, mask, ids), 1)


def _last_real_token(graph: ir.Graph, hidden: ir.Value, mask: ir.Value,
                     ids: ir.Value) -> list[ir.Node]:
    """hidden [B, S, H] -> [B, 1, H] at each row's last chunk position with mask 1.

    Positions are counted from data (CumSum of ones; no Shape op, which some
    EPs lack) in int32 (what shader EPs compute in); the row is selected with
    Where + ReduceSum, exact (x + 0 = x) and deaf to whatever the other
    positions hold. Every new value is typed and shaped (concrete-dims EPs).
    """
    nodes: list[ir.Node] = []
    (batch, seq), total_dim = list(ids.shape), mask.shape[1]
    int32, boolean = ir.DataType.INT32, ir.DataType.BOOL

    def add(op: str, inputs, dtype: ir.DataType, dims, **attributes) -> ir.Value:
        node = ir.Node("", op, inputs, attributes=ir.convenience.convert_attributes(attributes))
        node.outputs[0].type, node.outputs[0].shape = ir.TensorType(dtype), ir.Shape(dims)
        nodes.append(node)
        return node.outputs[0]

    axis1 = _const(graph, [1], np.int64)

    def counted(value: ir.Value, dims) -> ir.Value:  # 1, 2, ... along axis 1
        ones = add("Cast", [add("Equal", [value, value], boolean, dims)], int32, dims, to=int32)
        return add("CumSum", [ones, _const(graph, 1, np.int32)], int32, dims)

    chunk, total = counted(ids, [batch, seq]), counted(mask, [batch, total_dim])
    real = add("Mul", [add("Cast", [mask], int32, [batch, total_dim], to=int32), total],
               int32, [batch, total_dim])  # position + 1 where the mask is 1
    row = [batch, 1]
    past = add("Sub", [add("ReduceMax", [total, axis1], int32, row),
                       add("ReduceMax", [chunk, axis1], int32, row)], int32, row)
    last = add("Sub", [add("ReduceMax", [real, axis1], int32, row), past], int32, row)
    pick = add("Unsqueeze", [add("Equal", [chunk, last], boolean, [batch, seq]),
                             _const(graph, [2], np.int64)], boolean, [batch, seq, 1])
    dtype = hidden.type.dtype
    zero = _const(graph, 0, dtype.numpy())
    chosen = add("Where", [pick, hidden, zero], dtype, list(hidden.shape))
    add("ReduceSum", [chosen, axis1], dtype, [batch, 1, hidden.shape[2]])
    return nodes


def _limit_before_head(graph: ir.Graph, cut, dim: int | str) -> None:
    """``cut(hidden)`` (nodes whose last output is the limited hidden states) feeds the LM
    head; every value from the head to ``logits`` gets ``dim`` as its sequence dim."""
    chain = _head_chain(graph)
    head = chain[-1]
    flatten = _flatten_before(head, chain)
    if flatten is not None:  # Reshape(Gemm(Reshape(hidden, [-1, H]), E), [batch, seq, vocab])
        head = flatten
        _free_sequence_dim(graph, chain[-2])
    hidden = head.inputs[0]
    nodes = cut(hidden)
    limited = nodes[-1].outputs[0]
    limited.type = hidden.type
    limited.shape = _with_dim1(hidden.shape, dim)
    for node in nodes:
        graph.insert_before(head, node)
    head.replace_input_with(0, limited)
    for node in chain:
        for out in node.outputs:
            out.shape = _with_dim1(out.shape, dim)


def lm_head_input(graph: ir.Graph) -> ir.Value:
    """The hidden states [batch, seq, hidden] the LM head reads (what an MTP head takes:
    mobius/tasks/mtp.py)."""
    chain = _head_chain(graph)
    flatten = _flatten_before(chain[-1], chain)
    return (flatten if flatten is not None else chain[-1]).inputs[0]


def _head_chain(graph: ir.Graph) -> list[ir.Node]:
    """The nodes from the ``logits`` output back to the LM head (last in the list)."""
    logits = next((v for v in graph.outputs if v.name == "logits"), None)
    chain, value = [], logits
    while value is not None and value.producer() is not None:
        node = value.producer()
        chain.append(node)
        key = (node.domain, node.op_type)
        if key in _LM_HEADS:
            return chain
        if key == ("", "Reshape") and _produced_by_head(node.inputs[0]):
            value = node.inputs[0]  # the [rows, vocab] -> [batch, seq, vocab] after a 2-D head
            continue
        if key not in _PER_POSITION:
            break
        value = next((v for v in node.inputs if v is not None and not _is_constant(v)), None)
    raise MobiusError("num_logits_to_keep: no LM head MatMul found before the logits output")


def _produced_by_head(value: ir.Value | None) -> bool:
    node = value.producer() if value is not None else None
    return node is not None and (node.domain, node.op_type) in _LM_HEADS


def _flatten_before(head: ir.Node, chain: list[ir.Node]) -> ir.Node | None:
    """The Reshape to [rows, hidden] feeding a 2-D head (mobius/components/lm_head.py:
    a Gemm, or the MatMulNBits it was quantized to) whose output a Reshape restores."""
    rows = head.inputs[0].producer() if head.inputs[0] is not None else None
    if (len(chain) < 2 or chain[-2].op_type != "Reshape" or rows is None
            or rows.op_type != "Reshape" or rows.domain != ""):
        return None
    return rows


def _free_sequence_dim(graph: ir.Graph, reshape: ir.Node) -> None:
    """Reshape(logits, [b, s, v]) -> Reshape(logits, [b, -1, v]): the rows are now b * k.
    Built from the existing shape vector, without a Shape op (some EPs have none)."""
    shape = reshape.inputs[1]
    zero, one, two, three = (_const(graph, [i], np.int64) for i in range(4))
    batch = ir.Node("", "Slice", [shape, zero, one])
    vocab = ir.Node("", "Slice", [shape, two, three])
    new_shape = ir.Node("", "Concat", [batch.outputs[0], _const(graph, [-1], np.int64),
                                       vocab.outputs[0]], attributes=[ir.AttrInt64("axis", 0)])
    for node, length in ((batch, 1), (vocab, 1), (new_shape, 3)):
        node.outputs[0].type = ir.TensorType(ir.DataType.INT64)
        node.outputs[0].shape = ir.Shape([length])
        graph.insert_before(reshape, node)
    reshape.replace_input_with(1, new_shape.outputs[0])


def _is_constant(value: ir.Value) -> bool:
    return value.const_value is not None or value.is_initializer()


def _with_dim1(shape: ir.Shape | None, dim: int | str) -> ir.Shape | None:
    if shape is None or len(shape) != 3:
        return shape
    return ir.Shape([shape[0], dim, shape[2]])


def _const(graph: ir.Graph, values, np_dtype) -> ir.Value:
    array = np.asarray(values, dtype=np_dtype)
    shape = "x".join(str(d) for d in array.shape)
    name = f"mobius_logits_{array.dtype}{shape}_{'_'.join(str(v) for v in array.reshape(-1))}"
    existing = graph.initializers.get(name)
    if existing is not None:
        return existing
    value = ir.Value(name=name, type=ir.TensorType(ir.tensor(array).dtype),
                     shape=ir.Shape(array.shape), const_value=ir.tensor(array))
    graph.register_initializer(value)
    return value
