"""A tied embedding quantized once (mobius.quantize.emit_tied), on tiny-qwen2 (tied, cpu EP).

The shared package is compared with the same build where the EP lacks a
GatherBlockQuantized kernel (the lookup and the head then quantize the
matrix apart, as before): same RTN codes, so the same logits, one quantized
copy of the matrix fewer on disk.
"""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import mobius
from mobius.ep import contrib_ops
from mobius.ep.registry import get_ep
from mobius.tiny.checkpoint import make_tiny_checkpoint
from testing import ep_parity, genai_harness, parity

CPU = get_ep("cpu")
#: the cpu EP without a GatherBlockQuantized kernel: the separately quantized reference
NO_GATHER_KERNEL = dataclasses.replace(
    CPU, name="cpu-no-gbq", contrib_ops=CPU.contrib_ops - {contrib_ops.GATHER_BLOCK_QUANTIZED},
    quant_embedding=False)
VOCAB, HIDDEN = 1031, 64  # tiny-qwen2
PROMPT = [17, 93, 251, 407, 12, 99, 64, 5]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_tiny_checkpoint("tiny-qwen2", str(tmp_path_factory.mktemp("ckpt")))


def _build(folder, ep=CPU, quant="int4", **options):
    return mobius.build(folder, execution_provider=ep, quant=quant, quant_embedding=True,
                        **options)


def _initializers(path: str) -> dict[str, np.ndarray]:
    model = onnx.load(os.path.join(path, "model.onnx"))
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _copies_of_table(arrays: dict[str, np.ndarray]) -> list[str]:
    """Initializers holding the quantized table's codes: [V, H / 2] bytes in any shape."""
    return [name for name, a in arrays.items()
            if a.dtype == np.uint8 and a.size == VOCAB * HIDDEN // 2 and a.shape[0] == VOCAB]


def _nbytes(arrays: dict[str, np.ndarray], quantized_only: bool = False) -> int:
    """Bytes of every initializer, or of the quantized weights' only (codes and scales)."""
    def weight(name):  # "x_Q", "x_scales", or a second one: "x_Q.1"
        return re.sub(r"\.\d+$", "", name).endswith(("_Q", "_scales"))
    return sum(a.nbytes for n, a in arrays.items() if weight(n) or not quantized_only)


def _lookup_and_head(package) -> tuple[ir.Node | None, ir.Node]:
    graph = package.model.graph
    lookup = next((n for n in graph if n.op_type == "GatherBlockQuantized"), None)
    head = next(n for n in graph if n.op_type == "MatMulNBits" and n.attributes["N"].value == VOCAB)
    return lookup, head


@pytest.mark.parametrize("quant_embedding,shared", [(None, True), (False, False)])
def test_a_tied_table_is_shared_by_default_and_float_when_asked(folder, tmp_path,
                                                               quant_embedding, shared):
    """Without --quant-embedding an int4 package of a tied model holds no float table
    (as onnxruntime-genai's builder does); --no-quant-embedding keeps it float."""
    package = mobius.build(folder, execution_provider=CPU, quant="int4",
                           quant_embedding=quant_embedding)
    lookup, head = _lookup_and_head(package)
    assert (lookup is not None and lookup.inputs[0] is head.inputs[1]) == shared
    arrays = _initializers(package.save(str(tmp_path / "pkg")))
    float_tables = [n for n, a in arrays.items() if a.dtype.kind == "f" and a.size == VOCAB * HIDDEN]
    assert float_tables == ([] if shared else ["model.embed_tokens.weight"])


@pytest.mark.parametrize("quant_embedding", [None, True])
def test_a_float_head_keeps_one_float_table(folder, quant_embedding):
    """--no-quant-lm-head on a tied model: the lookup and the head read one float table
    (quantizing the lookup alone would add a copy, not replace one)."""
    package = mobius.build(folder, execution_provider=CPU, quant="int4", quant_lm_head=False,
                           quant_embedding=quant_embedding)
    graph = package.model.graph
    assert not any(n.op_type in ("GatherBlockQuantized", "MatMulNBits")
                   and n.inputs[1].name in ("input_ids", "model.embed_tokens_Q")
                   for n in graph)
    readers = {u.node.op_type for u in graph.initializers["model.embed_tokens.weight"].uses()}
    assert "Gather" in readers and len(readers) == 2


def test_one_quantized_copy_read_by_both_ops(folder, tmp_path):
    package = _build(folder)
    lookup, head = _lookup_and_head(package)
    assert lookup.inputs[0] is head.inputs[1]  # the codes, [V, blocks, blob] as MatMulNBits reads
    scales_view = lookup.inputs[2].producer()  # the scales, through a Reshape kept in the graph
    assert scales_view.op_type == "Reshape" and scales_view.inputs[0] is head.inputs[2]
    arrays = _initializers(package.save(str(tmp_path / "shared")))
    assert _copies_of_table(arrays) == ["model.embed_tokens_Q"]
    assert not any(a.dtype.kind == "f" and a.size == VOCAB * HIDDEN for a in arrays.values())


def test_size_drops_by_one_quantized_matrix(folder, tmp_path):
    shared = _initializers(_build(folder).save(str(tmp_path / "shared")))
    apart = _initializers(_build(folder, NO_GATHER_KERNEL).save(str(tmp_path / "apart")))
    assert len(_copies_of_table(apart)) == 2  # the fallback: today's two copies
    one_copy = VOCAB * HIDDEN // 2 + VOCAB * (HIDDEN // 32) * 4  # codes + f32 scales
    print(f"\ntiny-qwen2 int4 initializers: {_nbytes(apart)} -> {_nbytes(shared)} bytes")
    assert _nbytes(apart, True) - _nbytes(shared, True) == one_copy
    # the rest differs by small constants: the Reshapes' shapes, the inlined lookup's zero points
    assert abs(_nbytes(apart) - _nbytes(shared) - one_copy) < VOCAB * 4


def _logits(package, optimize: bool = True) -> np.ndarray:
    ids, mask = parity.make_batch(VOCAB, 8, 2, 0)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    proto = ir.serde.serialize_model(package.model).SerializeToString()
    session = ort.InferenceSession(proto, options, providers=["CPUExecutionProvider"])
    run, _ = ep_parity.run(session, package.config, ids, mask, 2, np.float32)
    return np.concatenate([step.reshape(-1, VOCAB) for step in run.logits])


@pytest.mark.parametrize("options", [{}, {"quant_accuracy_level": 1}, {"quant": "int8"}],
                         ids=["level4", "level1", "int8"])
def test_logits_equal_the_separately_quantized_build(folder, options):
    package = _build(folder, **options)
    lookup, head = _lookup_and_head(package)
    assert lookup.inputs[0] is head.inputs[1]
    shared = _logits(package)
    # unoptimized (the scales' Reshape runs rather than being folded): the same logits
    np.testing.assert_allclose(_logits(package, optimize=False), shared, rtol=0, atol=1e-5)
    apart = _logits(_build(folder, NO_GATHER_KERNEL, **options))
    scale = float(np.abs(apart).max())
    np.testing.assert_allclose(shared, apart, rtol=0, atol=1e-5 * scale)


@pytest.mark.parametrize("options, lookups, head_bits", [
    ({"quant_symmetric": False}, 1, 4), ({"quant_override": "lm_head=int8"}, 1, 8),
    ({"quant_block_size": 128}, 0, 4)], ids=["asymmetric", "head-int8", "block-over-hidden"])
def test_falls_back_to_separate_copies(folder, options, lookups, head_bits):
    """Asymmetric (the kernels' zero-point layouts of the blocked form differ), other bits
    for the head, or a block that does not divide H (the lookup stays float): apart. The
    head is still the head once the lookup has its own copy (lm_head overrides reach it)."""
    package = _build(folder, **options)
    graph = package.model.graph
    found = [n for n in graph if n.op_type == "GatherBlockQuantized"]
    head = _lookup_and_head(package)[1]
    assert head.attributes["bits"].value == head_bits
    assert len(found) == lookups
    assert all(n.inputs[0] is not head.inputs[1] for n in found)
    assert all(n.attributes["quantize_axis"].value == 1 for n in found)
    assert lookups or "model.embed_tokens.weight" in graph.initializers


def test_genai_greedy_equals_onnxruntime_steps(folder, tmp_path):
    package = _build(folder)
    path = package.save(str(tmp_path / "int4"))
    assert len(_copies_of_table(_initializers(path))) == 1
    genai = genai_harness.genai_generate(path, [PROMPT], 10)[0]
    ids = np.array([PROMPT], np.int64)
    _, chosen = ep_parity.run(ep_parity.session(package.model), package.config, ids,
                              np.ones_like(ids), 10, np.float32)
    assert genai == [int(t[0, 0]) for t in chosen]
    assert len(set(genai)) > 1, "degenerate continuation: the comparison would prove little"
