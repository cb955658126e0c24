"""BuildRequest: every mobius.build option has its group, and each group is checked before
anything is read (the request's model path is never opened here)."""

from __future__ import annotations

import inspect

import pytest

import mobius
from mobius.errors import MobiusError
from mobius.request import AdapterOptions, BuildRequest, QuantOptions, RuntimeOptions
from mobius.tasks.registry import get_task

_MISSING = "/nonexistent/checkpoint"  # target() must fail or pass without reading it


def test_every_build_option_has_a_place_in_the_request():
    defaults = {name: p.default for name, p in inspect.signature(mobius.build).parameters.items()
                if name != "model"}
    assert BuildRequest.from_options(_MISSING, **defaults) == BuildRequest(_MISSING)


def test_flat_options_land_in_their_groups():
    request = BuildRequest.from_options(
        _MISSING, execution_provider="cpu", quant="int4", quant_block_size=64,
        quant_override=("lm_head=int8",), layout="transformers.js", prefill_logits="all",
        context_length=512, adapter="a", adapter_mode="separate", progress=True)
    assert request.quant == QuantOptions("int4", block_size=64, override=("lm_head=int8",))
    assert request.runtime == RuntimeOptions("transformers.js", prefill_logits="all",
                                             context_length=512)
    assert request.adapters == AdapterOptions(("a",), "separate")
    assert (request.execution_provider, request.progress) == ("cpu", True)


def test_target_resolves_the_eps_quantization_defaults():
    target = BuildRequest.from_options(_MISSING, execution_provider="cpu", quant="int4").target()
    assert target.caps.name == "cpu" and target.quant.bits == 4
    assert target.quant.block_size == target.caps.default_quant_block_size


@pytest.mark.parametrize("options,message", [
    (dict(execution_provider="nope"), "nope"),
    (dict(execution_provider="webgpu", dtype="bf16"), "does not support bf16"),
    (dict(quant="int3"), "int3"),
    (dict(prefill_logits="first"), "unknown prefill logits"),
    (dict(prefill_logits="last", logits_to_keep=True), "both choose the logits rows"),
    (dict(adapter_mode="stacked"), "adapter mode 'stacked'"),
])
def test_a_bad_option_fails_before_the_checkpoint_is_read(options, message):
    with pytest.raises((MobiusError, ValueError), match=message):  # an unknown EP: ValueError
        BuildRequest.from_options(_MISSING, **options).target()


def test_runtime_options_are_checked_against_the_task():
    with pytest.raises(MobiusError, match="only a causal LM's logits"):
        RuntimeOptions(prefill_logits="last").check(get_task("feature-extraction"))
    RuntimeOptions(prefill_logits="last").check(get_task("text-generation"))
