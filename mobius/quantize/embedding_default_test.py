"""An untied token table is quantized by default where the EP has GatherBlockQuantized
(EpCapabilities.quant_embedding), at the build's bits, on tiny-llama (untied).

The float table is what made an untied int4 package twice llama.cpp's Q4_0
file (docs/benchmarks.md, "package size"); --no-quant-embedding keeps it, and
an EP without the kernel keeps it, since its lookup would dequantize the whole
table every step.
"""

from __future__ import annotations

import numpy as np
import pytest

import mobius
from mobius.ep import contrib_ops
from mobius.ep.registry import ep_registry
from mobius.quantize.spec import resolve_quant
from mobius.tiny.checkpoint import make_tiny_checkpoint
from testing import ep_parity, parity

TABLE = "model.embed_tokens.weight"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt")))


def _logits(package) -> np.ndarray:
    ids, mask = parity.make_batch(package.config.vocab_size, 8, 0, 0)
    run, _ = ep_parity.run(ep_parity.session(package.model), package.config, ids, mask, 0,
                           np.float32)
    return run.logits[0]


def _lookups(package) -> list:
    return [n for n in package.model.graph if n.op_type == "GatherBlockQuantized"]


@pytest.mark.parametrize("quant,bits", [("int4", 4), ("int8", 8)])
def test_the_default_holds_no_float_table(folder, quant, bits):
    package = mobius.build(folder, execution_provider="cpu", quant=quant)
    graph = package.model.graph
    (lookup,) = _lookups(package)
    assert lookup.attributes["bits"].value == bits
    assert lookup.attributes["block_size"].value == 32
    assert TABLE not in graph.initializers
    assert not any(n.op_type == "Gather" and n.inputs[0].name == TABLE for n in graph)


def test_int4_logits_stay_within_the_int4_bound(folder):
    """The quantized table adds RTN noise to every token's vector, but the package stays
    within the bound quality_test holds every int4 family to (half the logit scale),
    and close to the same build with a float table."""
    reference = _logits(mobius.build(folder, execution_provider="cpu"))
    scale = float(np.abs(reference).max())
    quantized = _logits(mobius.build(folder, execution_provider="cpu", quant="int4"))
    float_table = _logits(mobius.build(folder, execution_provider="cpu", quant="int4",
                                       quant_embedding=False))
    error = float(np.abs(quantized - reference).max())
    assert 0 < error <= 0.5 * scale
    assert error <= 2 * float(np.abs(float_table - reference).max())
    assert not np.array_equal(quantized, float_table)


def test_no_quant_embedding_keeps_the_float_gather(folder):
    package = mobius.build(folder, execution_provider="cpu", quant="int4", quant_embedding=False)
    assert not _lookups(package)
    assert any(n.op_type == "Gather" and n.inputs[0].name == TABLE for n in package.model.graph)


@pytest.mark.parametrize("caps", [c for c in ep_registry if 4 in c.quant_bits
                                  and not c.has_kernel(contrib_ops.GATHER_BLOCK_QUANTIZED)],
                         ids=lambda c: c.name)
def test_an_ep_without_the_kernel_keeps_the_float_table(caps):
    assert not resolve_quant(caps, "int4").embedding


def test_a_build_without_the_kernel_keeps_the_float_gather(folder):
    package = mobius.build(folder, execution_provider="default", quant="int4")
    assert not _lookups(package)
    assert TABLE in package.model.graph.initializers
