"""Small GroupQueryAttention graphs and tiny-model builds for the QKV / RoPE rule tests.

``gqa_model`` builds one attention block the way the fuse stage leaves it:
Q/K/V projections (MatMul [+ bias Add]) of one input feeding a com.microsoft
GroupQueryAttention (optionally packed, optionally with RoPE absorbed or
applied before by opset-23 RotaryEmbedding). Weights are ``ir.LazyTensor``
initializers whose loaders count their reads, so a test can assert that a
rewrite read no weight. ``run`` executes a model on onnxruntime's CPU EP.
"""

from __future__ import annotations

import collections
import dataclasses
import os

import numpy as np
import onnx_ir as ir

from mobius.contrib.group_query_attention import GqaSpec, make_gqa_node, spec_from_node

F32, F16 = ir.DataType.FLOAT, ir.DataType.FLOAT16
NP = {F32: np.float32, F16: np.float16}


class CountingLoader:
    """A LazyTensor function returning a fixed array; ``reads`` counts evaluations."""

    def __init__(self, array: np.ndarray, reads: collections.Counter, name: str):
        self.array, self.reads, self.name = array, reads, name

    def __call__(self) -> ir.Tensor:
        self.reads[self.name] += 1
        return ir.Tensor(self.array)


@dataclasses.dataclass
class Dims:
    batch: int = 2
    seq: int = 3
    past: int = 0  # the CPU kernel takes past context with seq > 1 only for batch 1
    hidden: int = 24
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 16
    max_pos: int = 32
    rotary_dim: int | None = None  # None: full head_dim

    @property
    def total(self) -> int:
        return self.past + self.seq


@dataclasses.dataclass
class GqaModel:
    model: ir.Model
    reads: collections.Counter
    arrays: dict  # initializer name -> numpy array (the lazy weights' data)
    dims: Dims
    dtype: ir.DataType

    @property
    def gqa(self) -> ir.Node:
        return next(n for n in self.model.graph if n.op_type == "GroupQueryAttention")

    @property
    def spec(self) -> GqaSpec:
        return spec_from_node(self.gqa)

    def feeds(self, seed: int = 1) -> dict:
        return make_feeds(self.model, self.dims, self.dtype, seed)


def gqa_model(
    dtype: ir.DataType = F32,
    *,
    dims: Dims | None = None,
    bias: bool = False,
    rope: str = "absorbed",  # "absorbed" (do_rotary=1), "outside" (RotaryEmbedding), "none"
    packed: bool = False,
    layers: int = 1,
    seed: int = 0,
) -> GqaModel:
    """One (or ``layers``) GQA blocks reading the graph input ``x``; outputs per layer."""
    d = dims or Dims()
    np_dtype = NP[dtype]
    rng = np.random.default_rng(seed)
    reads: collections.Counter = collections.Counter()
    arrays: dict = {}
    graph = ir.Graph([], [], nodes=[], opset_imports={"": 23, "com.microsoft": 1}, name="gqa")
    model = ir.Model(graph, ir_version=10)

    def inp(name, elem, shape):
        value = ir.Value(name=name, type=ir.TensorType(elem), shape=ir.Shape(shape))
        graph.inputs.append(value)
        return value

    def init(name, array, lazy=True):
        arrays[name] = array
        tensor = (ir.LazyTensor(CountingLoader(array, reads, name), ir.DataType.from_numpy(array.dtype),
                                ir.Shape(array.shape), name=name) if lazy else ir.Tensor(array, name=name))
        value = ir.Value(name=name, type=ir.TensorType(tensor.dtype), shape=ir.Shape(array.shape),
                         const_value=tensor)
        graph.register_initializer(value)
        return value

    def node(op, inputs, domain="", **attrs):
        n = ir.Node(domain, op, inputs, attributes=ir.convenience.convert_attributes(attrs))
        graph.append(n)
        n.outputs[0].type = inputs[0].type  # what the real builder records (bodies need types)
        return n.outputs[0]

    x = inp("x", dtype, ["batch", "seq", d.hidden])
    seqlens = inp("seqlens_k", ir.DataType.INT32, ["batch"])
    total = inp("total_sequence_length", ir.DataType.INT32, [])
    positions = inp("position_ids", ir.DataType.INT64, ["batch", "seq"])
    bias_in = inp("attention_bias", dtype, ["batch", 1, "seq", "total"])
    rd = d.rotary_dim or d.head_dim
    inv = 1.0 / (10000 ** (np.arange(0, rd, 2) / rd))
    angles = np.outer(np.arange(d.max_pos), inv)
    cos_cache = init("cos_cache", np.cos(angles).astype(np_dtype), lazy=False)
    sin_cache = init("sin_cache", np.sin(angles).astype(np_dtype), lazy=False)
    widths = (d.heads * d.head_dim, d.kv_heads * d.head_dim, d.kv_heads * d.head_dim)
    cos = sin = None
    if rope == "outside":
        cos = node("Gather", [cos_cache, positions], axis=0)
        sin = node("Gather", [sin_cache, positions], axis=0)
    for layer in range(layers):
        prefix = f"layers.{layer}.attn."
        past_k = inp(f"past_key.{layer}", dtype, ["batch", d.kv_heads, "past", d.head_dim])
        past_v = inp(f"past_value.{layer}", dtype, ["batch", d.kv_heads, "past", d.head_dim])
        w = [(rng.standard_normal((d.hidden, n)) / np.sqrt(d.hidden)).astype(np_dtype) for n in widths]
        b = [(0.1 * rng.standard_normal(n)).astype(np_dtype) for n in widths]
        if packed:
            qkv = node("MatMul", [x, init(prefix + "qkv_proj.weight", np.concatenate(w, axis=1))])
            if bias:
                qkv = node("Add", [qkv, init(prefix + "qkv_proj.bias", np.concatenate(b))])
            q = k = v = None
            query = qkv
        else:
            outs = []
            for role, wi, bi in zip("qkv", w, b):
                y = node("MatMul", [x, init(f"{prefix}{role}_proj.weight", wi)])
                if bias:
                    y = node("Add", [y, init(f"{prefix}{role}_proj.bias", bi)])
                outs.append(y)
            q, k, v = outs
            if rope == "outside":
                partial = rd if rd != d.head_dim else 0
                q = node("RotaryEmbedding", [q, cos, sin], interleaved=0, num_heads=d.heads,
                         rotary_embedding_dim=partial)
                k = node("RotaryEmbedding", [k, cos, sin], interleaved=0, num_heads=d.kv_heads,
                         rotary_embedding_dim=partial)
            query = q
        absorbed = rope == "absorbed"
        inputs = [query, k, v, past_k, past_v, seqlens, total]
        inputs += [cos_cache, sin_cache, positions] if absorbed else [None, None, None]
        inputs.append(bias_in)
        spec = GqaSpec(d.heads, d.kv_heads, d.head_dim, d.head_dim**-0.5, absorbed, packed)
        gqa = make_gqa_node(model, spec, inputs, name=f"layers.{layer}.GroupQueryAttention")
        graph.append(gqa)
        names = [f"out.{layer}", f"present_key.{layer}", f"present_value.{layer}"]
        for value, name in zip(gqa.outputs, names):
            value.name = name
            value.type = ir.TensorType(dtype)
            graph.outputs.append(value)
    return GqaModel(model, reads, arrays, d, dtype)


def make_feeds(model: ir.Model, d: Dims, dtype: ir.DataType, seed: int = 1) -> dict:
    np_dtype = NP[dtype]
    rng = np.random.default_rng(seed)
    mask = np.triu(np.full((d.seq, d.total), -10000.0), k=d.past + 1)
    feeds = {
        "x": rng.standard_normal((d.batch, d.seq, d.hidden)).astype(np_dtype),
        "seqlens_k": np.full((d.batch,), d.total - 1, dtype=np.int32),
        "total_sequence_length": np.array(d.total, dtype=np.int32),
        "position_ids": np.tile(np.arange(d.past, d.total), (d.batch, 1)).astype(np.int64),
        "attention_bias": np.broadcast_to(mask, (d.batch, 1, d.seq, d.total)).astype(np_dtype),
    }
    names = {v.name for v in model.graph.inputs}
    for name in names:
        if name.startswith(("past_key", "past_value")):
            feeds[name] = rng.standard_normal((d.batch, d.kv_heads, d.past, d.head_dim)).astype(np_dtype)
    return {k: v for k, v in feeds.items() if k in names}


def run(model: ir.Model, feeds: dict, inline: bool = False) -> list[np.ndarray]:
    """Runs ``model`` on onnxruntime's CPU EP (``inline``: on the GQA function bodies instead)."""
    import onnxruntime as ort
    from onnx_ir.passes.common import InlinePass

    proto = ir.serde.serialize_model(model)
    if inline:
        copy = ir.serde.deserialize_model(proto)
        InlinePass()(copy)
        proto = ir.serde.serialize_model(copy)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def op_counts(model: ir.Model) -> collections.Counter:
    return collections.Counter(
        (f"{n.domain}::{n.op_type}" if n.domain else n.op_type) for n in model.graph)


# ---- tiny-model builds (mobius.build, no torch) -------------------------------------------------


def tiny_checkpoint(folder: str | os.PathLike, preset: str = "tiny-llama") -> str:
    from mobius.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint(preset, folder=str(folder))


def greedy_logits(model_path: str, config, dtype: str = "f32", steps: int = 3, pad: int = 0):
    """Prefill of an unpadded 2-row batch + ``steps`` greedy decode steps on the CPU EP."""
    import onnxruntime as ort

    from testing import parity

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    ids, mask = parity.make_batch(config.vocab_size, pad=pad)
    np_dtype = np.float16 if dtype == "f16" else np.float32
    logits, tokens = parity.onnx_greedy_logits(session, config, ids, mask, steps, np_dtype)
    return logits, tokens
