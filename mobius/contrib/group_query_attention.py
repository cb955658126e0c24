"""com.microsoft GroupQueryAttention and its standard-ONNX body.

Inputs mobius uses: query [B,S,H*D], key/value [B,S,KV*D], past_key/value
[B,KV,P,D], seqlens_k int32 [B], total_sequence_length int32 [], cos_cache /
sin_cache [max_pos, rotary_dim/2] (rotary only), position_ids [B,S] (rotary
only), attention_bias [B,1,S,T] (the additive causal+padding+window mask),
head_sink [H] (per-head sink logits, gpt-oss; the body is
mobius.components.attention_sinks).
The body ignores seqlens_k/total_sequence_length: the attention_bias already
encodes exactly which keys each query sees.
"""

from __future__ import annotations

import dataclasses
import re

import onnx_ir as ir

from mobius.components.attention_sinks import sink_attention
from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "GroupQueryAttention"
INPUT_NAMES = ("query", "key", "value", "past_key", "past_value", "seqlens_k",
               "total_sequence_length", "cos_cache", "sin_cache", "position_ids",
               "attention_bias", "head_sink")


@dataclasses.dataclass(frozen=True)
class GqaSpec:
    num_heads: int
    kv_num_heads: int
    head_dim: int
    scale: float
    do_rotary: bool
    packed_qkv: bool = False
    softcap: float = 0.0  # tanh-capping of the scaled logits (Gemma 2); 0 = off
    rotary_interleaved: bool = False  # do_rotary rotates adjacent pairs (Cohere, GLM)
    head_sink: bool = False  # input 11 holds per-head sink logits (gpt-oss)

    @property
    def overload(self) -> str:
        # exact floats: the body bakes them in, and bodies are shared by overload
        cap = f"_c{self.softcap!r}" if self.softcap else ""
        interleaved = "_i1" if self.rotary_interleaved else ""
        sink = "_sink" if self.head_sink else ""
        return (f"h{self.num_heads}_kv{self.kv_num_heads}_d{self.head_dim}_s{self.scale!r}"
                f"_r{int(self.do_rotary)}_p{int(self.packed_qkv)}{cap}{interleaved}{sink}")

    def attributes(self) -> dict:
        attributes = {"num_heads": self.num_heads, "kv_num_heads": self.kv_num_heads,
                      "scale": self.scale, "do_rotary": int(self.do_rotary),
                      "rotary_interleaved": int(self.rotary_interleaved)}
        if self.softcap:
            attributes["softcap"] = float(self.softcap)
        return attributes


def make_gqa_node(model: ir.Model, spec: GqaSpec, inputs: list, name: str) -> ir.Node:
    """Creates (not inserts) a GQA node that carries its function body."""
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, attributes=ir.convenience.convert_attributes(
        spec.attributes()), num_outputs=3, name=name)
    types = [v.type if v is not None else None for v in inputs]
    attach_function(model, node, lambda op, *args: _body(op, spec, *args), types, spec.overload)
    return node


def spec_from_node(node: ir.Node) -> GqaSpec | None:
    """The GqaSpec of an existing GQA node, or None if it has attributes a spec cannot express.

    head_dim comes from the function overload mobius attached, else from
    past_key's static shape [B, KV, P, D]; packed_qkv means key/value are empty.
    """
    if node.domain != MS_DOMAIN or node.op_type != OP_TYPE:
        return None
    attrs = {name: a.value for name, a in node.attributes.items()}
    if attrs.get(
            "smooth_softmax", 0) or attrs.get("local_window_size", -1) != -1 or attrs.get(
            "qk_output", 0):
        return None
    known = {"num_heads", "kv_num_heads", "scale", "do_rotary", "rotary_interleaved", "softcap",
             "smooth_softmax", "local_window_size", "qk_output"}
    if set(attrs) - known or "num_heads" not in attrs or "kv_num_heads" not in attrs:
        return None
    head_dim = None
    match = re.search(r"_d(\d+)_", node.overload or "")
    if match:
        head_dim = int(match.group(1))
    else:
        past_key = node.inputs[3] if len(node.inputs) > 3 else None
        if past_key is not None and past_key.shape is not None and len(past_key.shape) == 4:
            head_dim = past_key.shape[3] if isinstance(past_key.shape[3], int) else None
    if head_dim is None:
        return None
    scale = float(attrs.get("scale", 0.0)) or head_dim**-0.5
    packed = len(node.inputs) < 3 or (node.inputs[1] is None and node.inputs[2] is None)
    sink = len(node.inputs) > 11 and node.inputs[11] is not None
    return GqaSpec(int(attrs["num_heads"]), int(attrs["kv_num_heads"]), head_dim, scale,
                   bool(attrs.get("do_rotary", 0)), packed, float(attrs.get("softcap", 0.0)),
                   bool(attrs.get("rotary_interleaved", 0)), sink)


def retarget_gqa_node(model: ir.Model, node: ir.Node, spec: GqaSpec, inputs: list) -> None:
    """Gives an existing GQA node new inputs and ``spec`` in place (its outputs keep their uses).

    The node gets the attributes and the function overload of ``spec``.
    """
    if len(node.inputs) != len(inputs):
        node.resize_inputs(len(inputs))
    for index, value in enumerate(inputs):
        if node.inputs[index] is not value:
            node.replace_input_with(index, value)
    for attribute in ir.convenience.convert_attributes(spec.attributes()):
        node.attributes[attribute.name] = attribute
    types = [v.type if v is not None else None for v in inputs]
    attach_function(model, node, lambda op, *args: _body(op, spec, *args), types, spec.overload)


def _body(op, spec: GqaSpec, query, key, value, past_key, past_value, seqlens_k,
          total_sequence_length, cos_cache=None, sin_cache=None, position_ids=None,
          attention_bias=None, head_sink=None):
    h, kv, d = spec.num_heads, spec.kv_num_heads, spec.head_dim
    if spec.packed_qkv:
        query, key, value = op.Split(query, op.Constant(value_ints=[h * d, kv * d, kv * d]),
                                     axis=-1, _outputs=3)

    def heads(x, n):
        return op.Transpose(op.Reshape(x, op.Constant(value_ints=[0, 0, n, d])), perm=[0, 2, 1, 3])

    q, k, v = heads(query, h), heads(key, kv), heads(value, kv)
    if spec.do_rotary:
        interleaved = int(spec.rotary_interleaved)
        q = op.RotaryEmbedding(q, cos_cache, sin_cache, position_ids, interleaved=interleaved)
        k = op.RotaryEmbedding(k, cos_cache, sin_cache, position_ids, interleaved=interleaved)
    if spec.head_sink:
        y, present_key, present_value = sink_attention(
            op, q, k, v, attention_bias, past_key, past_value, head_sink, h, spec.scale,
            query.dtype)
    else:
        y, present_key, present_value = op.Attention(
            q, k, v, attention_bias, past_key, past_value, scale=spec.scale, is_causal=0,
            _outputs=3, **({"softcap": spec.softcap} if spec.softcap else {}))
    y = op.Reshape(op.Transpose(y, perm=[0, 2, 1, 3]), op.Constant(value_ints=[0, 0, h * d]))
    return y, present_key, present_value
