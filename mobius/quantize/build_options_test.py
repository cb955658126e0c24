"""Each --quant option changes the built graph where it should (tiny-llama, cpu EP)."""

import numpy as np
import pytest

import mobius
from mobius.tiny.checkpoint import make_tiny_checkpoint


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tiny_checkpoint("tiny-llama", str(tmp_path_factory.mktemp("ckpt")))


def _nbits(package) -> dict[str, dict]:
    """weight initializer name -> MatMulNBits attributes (+ input count)."""
    out = {}
    for node in package.model.graph:
        if node.op_type == "MatMulNBits":
            attrs = {k: a.value for k, a in node.attributes.items()}
            attrs["inputs"] = len(node.inputs)
            out[node.inputs[1].name] = attrs
    return out


def _float_weights(package) -> list[str]:
    """Constant weights still read by a float MatMul, or by the LM head's Gemm(transB=1)
    (a FusedMatMul on the cpu EP)."""
    return [n.inputs[1].name for n in package.model.graph
            if n.op_type in ("MatMul", "Gemm", "FusedMatMul") and n.inputs[1].is_initializer()]


def test_overrides_keep_layers_float_or_int8(folder):
    package = mobius.build(folder, execution_provider="cpu", quant="int4", quant_method="mse",
                           quant_override="layers.0.*=float,lm_head=int8")
    floats = _float_weights(package)
    assert floats and all(".layers.0." in name for name in floats)
    nbits = _nbits(package)
    assert nbits["lm_head_Q"]["bits"] == 8
    assert {a["bits"] for name, a in nbits.items() if name != "lm_head_Q"} == {4}
    assert not any(".layers.0." in name for name in nbits)


def test_lm_head_switch(folder):
    package = mobius.build(folder, execution_provider="cpu", quant="int4", quant_lm_head=False)
    assert _float_weights(package) == ["lm_head.weight"]


@pytest.mark.parametrize("block,symmetric,level", [(16, False, 1), (64, True, 0)])
def test_block_symmetry_and_accuracy_reach_the_nodes(folder, block, symmetric, level):
    package = mobius.build(folder, execution_provider="cpu", quant="int8", quant_block_size=block,
                           quant_symmetric=symmetric, quant_accuracy_level=level)
    nodes = list(_nbits(package).values())
    assert nodes and not _float_weights(package)
    for attrs in nodes:
        assert (attrs["bits"], attrs["block_size"], attrs["accuracy_level"]) == (8, block, level)
        assert attrs["inputs"] == (3 if symmetric else 4)
    scales = {v.name: v for v in package.model.graph.initializers.values()}
    assert scales["lm_head_scales"].shape[1] == -(-64 // block)


def test_embedding_switch(folder):
    plain = mobius.build(folder, execution_provider="cpu", quant="int4", quant_embedding=False)
    quantized = mobius.build(folder, execution_provider="cpu", quant="int4", quant_embedding=True)
    assert not any(n.op_type == "GatherBlockQuantized" for n in plain.model.graph)
    assert sum(n.op_type == "GatherBlockQuantized" for n in quantized.model.graph) == 1
    table = quantized.model.graph.initializers["model.embed_tokens_Q"].const_value.numpy()
    assert table.dtype == np.uint8 and table.shape == (1031, 32)
