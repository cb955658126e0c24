"""mobius.build's keyword arguments: any mix of types and values either builds or fails
with a MobiusError / TypeError / ValueError that names one of the arguments given."""

from __future__ import annotations

import pathlib

import onnx_ir as ir
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mobius
from mobius.build_args import ArgumentTypeError
from mobius.errors import MobiusError
from mobius.tiny.checkpoint import make_tiny_checkpoint
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype

#: per argument: valid values, values out of range, values of the wrong type
VALUES = {
    "execution_provider": ["default", "cpu", "webgpu", "no-such-ep", 3, None],
    "dtype": ["f32", "f16", "bf16", "f8", 16, ir.DataType.FLOAT16, ir.DataType.INT8, None],
    "trace_optimization": [True, False, 1, "yes", None],
    "progress": [False, 0, "no"],
    "quant": [None, "int4", "int8", "int3", 4, True],
    "quant_block_size": [None, 32, 64, 7, 0, -32, 32.0, "32", True, 2**40],
    "quant_symmetric": [None, True, False, 1, "no"],
    "quant_accuracy_level": [None, 0, 4, 5, -1, 4.0, "4"],
    "quant_lm_head": [None, True, False, "yes"],
    "quant_embedding": [None, True, False, 0],
    "quant_method": [None, "minmax", "mse", "gptq", 1],
    "quant_override": ["", "lm_head=int8", "layers.0.*=float", "no.such.layer=float", "a=b", "x",
                       {"a": "b"}, [("lm_head", "float")], [("a",)], [(1, 2)], 5, None],
    "layout": ["genai", "transformers.js", "onnx", 3, None],
    "logits_to_keep": [None, True, False, "yes"],
    "prefill_logits": [None, "last", "all", "first", 1],
    "context_length": [None, 64, 0, -1, 10**9, 64.0, "64"],
    "adapter": [None, "/no/such/adapter", 7, ["/no/such"], [3]],
    "adapter_mode": ["merged", "separate", "both", 1, None],
    "sliding_window_cache": [False, True, "yes", None],
    "mtp": [False, True, "yes"],
}
#: the command line's names where they differ from "--" + the argument's, dashed
FLAGS = {"execution_provider": ("--ep",), "quant_symmetric": ("--quant-asymmetric",),
         "trace_optimization": ("--trace",)}


def _spellings(name: str) -> tuple[str, ...]:
    return (name, name.replace("_", " "), "--" + name.replace("_", "-"), *FLAGS.get(name, ()))


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt") / "llama"))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kwargs=st.fixed_dictionaries({}, optional={k: st.sampled_from(v)
                                                  for k, v in VALUES.items()}))
def test_every_argument_builds_or_is_named(llama, kwargs):
    try:
        package = mobius.build(llama, **kwargs)
    except (MobiusError, TypeError, ValueError) as e:
        named = [n for n in kwargs if any(s in str(e) for s in _spellings(n))]
        assert named, f"{type(e).__name__}: {e} names none of {sorted(kwargs)}"
        return
    assert package.build_dtype == SHORT_NAMES[parse_dtype(kwargs.get("dtype", "f32"))]
    assert package.quant == kwargs.get("quant")


@pytest.mark.parametrize("kwargs, message", [
    ({"quant": "int4", "quant_block_size": 32.0},
     "quant_block_size must be an int or None, got float 32.0"),
    ({"quant": "int4", "quant_override": {"a": "b"}},
     "quant_override must be a str 'PATTERN=KIND,...' or a sequence of (pattern, kind) pairs, "
     "got dict {'a': 'b'}"),
    ({"quant": "int4", "quant_override": [("a", "fp8")]}, "bad --quant-override entry 'a=fp8'"),
    ({"context_length": 0}, "context_length must be at least 1, got 0"),
    ({"quant_accuracy_level": True}, "quant_accuracy_level must be an int or None, got bool True"),
    ({"progress": "no"}, "progress must be a bool, got str 'no'"),
    ({"adapter": 7}, "adapter must be a str, a path or a sequence of them, got int 7"),
])
def test_the_message_names_the_argument(llama, kwargs, message):
    with pytest.raises(MobiusError) as e:
        mobius.build(llama, **kwargs)
    assert str(e.value) == message or message in str(e.value)


def test_a_type_error_is_a_type_error(llama):
    with pytest.raises(TypeError, match="trace_optimization must be a bool"):
        mobius.build(llama, trace_optimization="yes")
    assert issubclass(ArgumentTypeError, MobiusError)


def test_a_path_object_is_a_model(llama):
    assert mobius.build(pathlib.Path(llama)).build_dtype == "f32"
