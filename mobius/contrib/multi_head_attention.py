"""com.microsoft MultiHeadAttention (unpacked, no cache) and its standard-ONNX body.

    output = MultiHeadAttention(query, key, value, , , attention_bias,
                                num_heads=N, scale=s)

takes Q/K/V as [batch, seq, heads * head_dim] projections and an optional
additive ``attention_bias`` [batch | 1, N | 1, seq, kv_seq]. The body splits the
heads (Reshape + Transpose), runs the opset-23 ``Attention`` op and merges the
heads back: exactly the form the models emit, so inlining restores the
generic graph. Inputs 3 (bias) and 4 (key_padding_mask) stay absent.
"""

from __future__ import annotations

import dataclasses

import onnx_ir as ir

from mobius.contrib.function_registry import MS_DOMAIN, attach_function

OP_TYPE = "MultiHeadAttention"
INPUT_NAMES = ("query", "key", "value", "bias", "key_padding_mask", "attention_bias")
ATTENTION_BIAS = INPUT_NAMES.index("attention_bias")


@dataclasses.dataclass(frozen=True)
class MhaSpec:
    num_heads: int
    scale: float

    @property
    def overload(self) -> str:
        return f"n{self.num_heads}_s{self.scale!r}"


def make_mha_node(model: ir.Model, spec: MhaSpec, query: ir.Value, key: ir.Value,
                  value: ir.Value, attention_bias: ir.Value | None,
                  name: str | None) -> ir.Node:
    """Creates (not inserts) the fused node, carrying its function body."""
    inputs = [query, key, value]
    if attention_bias is not None:
        inputs += [None, None, attention_bias]
    node = ir.Node(MS_DOMAIN, OP_TYPE, inputs, num_outputs=1, name=name,
                   attributes=[ir.AttrInt64("num_heads", spec.num_heads),
                               ir.AttrFloat32("scale", spec.scale)])
    types = [v.type if v is not None else None for v in inputs]
    present = "bias" if attention_bias is not None else "nobias"
    attach_function(model, node, lambda op, *args: _body(op, spec, *args), types,
                    f"{spec.overload}_{present}")
    return node


def _body(op, spec: MhaSpec, query, key, value, bias=None, key_padding_mask=None,
          attention_bias=None):
    def heads(x):
        x = op.Reshape(x, op.Constant(value_ints=[0, 0, spec.num_heads, -1]))
        return op.Transpose(x, perm=[0, 2, 1, 3])

    masks = () if attention_bias is None else (attention_bias,)
    out = op.Attention(heads(query), heads(key), heads(value), *masks, is_causal=0,
                       scale=spec.scale)
    out = op.Transpose(out, perm=[0, 2, 1, 3])
    return op.Reshape(out, op.Constant(value_ints=[0, 0, -1]))
