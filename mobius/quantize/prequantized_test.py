"""Which GPTQ / AWQ weights keep their integers on which EP, and what the others become.

Small packed checkpoints are written as real safetensors files (no model) and
opened through PrequantizedCheckpoint; plans are made against the built-in
EPs' capabilities.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir
import pytest
from onnx import numpy_helper

from mobius.ep.registry import get_ep
from mobius.quantize.prequantized import plan_for, prequantized_spec
from mobius.quantize.spec import resolve_quant
from mobius.weights.prequantized_checkpoint import PrequantizedCheckpoint, source_for
from mobius.weights.quantization_config import read_quantization_config
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint
from mobius.weights.safetensors_writer import write_safetensors
from testing.prequantized_checkpoints import gptq_config, pack_gptq, quantize

F32 = ir.DataType.FLOAT


def _checkpoint(tmp_path, layers, **config):
    """layers: name -> (out, in, order or None); returns (checkpoint, {name: Quantized})."""
    fmt = read_quantization_config({"quantization_config": gptq_config(**config)})
    rng = np.random.default_rng(0)
    tensors, made = {}, {}
    for name, (n, k, order) in layers.items():
        q = quantize(rng.standard_normal((n, k)).astype(np.float32), fmt.bits, fmt.group_size,
                     config.get("sym", True), order)
        made[name] = q
        tensors.update({f"{name}.{s}": v for s, v in pack_gptq(q, fmt.bits).items()})
    write_safetensors(str(tmp_path / "model.safetensors"), tensors)
    return PrequantizedCheckpoint(SafetensorsCheckpoint(str(tmp_path)), fmt), made


def _plan(checkpoint, names, ep):
    caps = get_ep(ep)
    sources = [source_for(checkpoint, checkpoint.packed(f"{n}.weight"), lambda a: a.T)
               for n in names]
    return plan_for(sources, caps, prequantized_spec(caps, checkpoint.format), F32, "w")


def test_a_group_size_the_ep_takes_keeps_the_integers(tmp_path, caplog):
    checkpoint, made = _checkpoint(tmp_path, {"a": (24, 64, None)}, group_size=32, sym=False)
    with caplog.at_level(logging.INFO, "mobius.quantize.prequantized"):
        plan = _plan(checkpoint, ["a"], "cpu")
    qw = plan.produce()
    assert (plan.layout.block_size, plan.layout.symmetric, plan.perm) == (32, False, None)
    np.testing.assert_array_equal(qw.codes, made["a"].codes)
    np.testing.assert_array_equal(qw.zero_points, made["a"].zeros)
    assert caplog.records == []


@pytest.mark.parametrize("group, k, block", [(48, 96, 16), (None, 96, 64), (None, 64, 64)])
def test_other_group_sizes_are_reblocked_exactly(tmp_path, caplog, group, k, block):
    checkpoint, made = _checkpoint(tmp_path, {"a": (16, k, None)}, group_size=group, sym=False)
    with caplog.at_level(logging.INFO, "mobius.quantize.prequantized"):
        plan = _plan(checkpoint, ["a"], "cpu")
    assert plan.layout.block_size == block
    np.testing.assert_array_equal(plan.produce().dequantize(), made["a"].weight())
    assert all(r.levelno == logging.INFO and "re-blocked exactly" in r.message
               for r in caplog.records) and len(caplog.records) == ((group or k) != block)


def test_act_order_sorts_the_channels_and_the_activations_follow(tmp_path):
    order = np.random.default_rng(1).permutation(64)
    checkpoint, made = _checkpoint(tmp_path, {"q": (16, 64, order), "k": (8, 64, order)},
                                   group_size=16, sym=False)
    plan = _plan(checkpoint, ["q", "k"], "cpu")  # a packed Q/K pair sharing the act-order
    qw = plan.produce()
    assert qw.g_idx is None and (plan.layout.n, plan.layout.block_size) == (24, 16)
    reference = np.concatenate([made["q"].weight(), made["k"].weight()])
    np.testing.assert_array_equal(qw.dequantize(), reference[:, plan.perm])
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    np.testing.assert_allclose(x[:, plan.perm] @ qw.dequantize().T, x @ reference.T, atol=1e-5)


@pytest.mark.parametrize("ep, layers, config, reason", [
    ("trt-rtx", {"a": (16, 128, None)}, dict(group_size=128, sym=False),
     "the EP takes no zero points"),
    ("trt-rtx", {"a": (16, 128, None)}, dict(group_size=32, sym=True),
     "group size 32 is not a multiple of a block size the EP takes (128)"),
    ("trt-rtx", {"a": (16, 128, None)}, dict(bits=8, group_size=128, sym=True),
     "the EP takes no 8-bit weights"),
    ("cpu", {"a": (16, 64, np.arange(64)[::-1]), "b": (16, 64, None)},
     dict(group_size=16, sym=True), "the packed Q/K/V parts differ"),
])
def test_what_the_ep_cannot_take_is_requantized_with_the_reason_logged(tmp_path, caplog, ep,
                                                                       layers, config, reason):
    checkpoint, made = _checkpoint(tmp_path, layers, **config)
    caps = get_ep(ep)
    spec = resolve_quant(caps, "int4")  # what --quant int4 asks (8 bits: no spec without it)
    sources = [source_for(checkpoint, checkpoint.packed(f"{n}.weight"), lambda a: a.T)
               for n in layers]
    with caplog.at_level(logging.WARNING, "mobius.quantize.prequantized"):
        plan = plan_for(sources, caps, spec, F32, "w")
    assert len(caplog.records) == 1 and reason in caplog.records[0].message
    assert "requantizing" in caplog.records[0].message
    qw = plan.produce()
    assert plan.perm is None and qw.bits in caps.quant_bits
    assert qw.block_size in caps.quant_block_sizes
    assert qw.zero_points is None or caps.quant_zero_points
    reference = np.concatenate([made[n].weight() for n in layers])
    step = np.abs(np.repeat(qw.scales, qw.block_size, axis=1)[:, :reference.shape[1]])
    assert (np.abs(qw.dequantize() - reference) <= step / 2 + 1e-6).all()


def test_ort_cpu_matmul_nbits_ignores_uint8_zero_points_when_given_g_idx():
    """Why act-order is emitted as sorted channels + Gather rather than through
    MatMulNBits' g_idx input: onnxruntime's CPU kernel then takes every zero point
    as 2**(bits - 1). If this starts failing, the kernel honours them: revisit."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    k, n, block = 64, 16, 16
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    scales = (rng.random((n, k // block)) + 0.5).astype(np.float32)
    zeros = rng.integers(0, 16, (n, k // block)).astype(np.uint8)
    g_idx = rng.permutation(np.arange(k) // block).astype(np.int32)
    nibbles = lambda a: (a[..., 0::2] | (a[..., 1::2] << 4)).astype(np.uint8)  # noqa: E731
    inits = [numpy_helper.from_array(nibbles(codes).reshape(n, k // block, block // 2), "B"),
             numpy_helper.from_array(scales.reshape(-1), "scales"),
             numpy_helper.from_array(nibbles(zeros).reshape(-1), "zp"),
             numpy_helper.from_array(g_idx, "g_idx")]
    node = helper.make_node("MatMulNBits", ["A", "B", "scales", "zp", "g_idx"], ["Y"],
                            domain="com.microsoft", K=k, N=n, bits=4, block_size=block,
                            accuracy_level=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT,
                                                                          [k, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [k, n])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"A": np.eye(k, dtype=np.float32)})[0].T  # the weight it used
    asked = (codes - zeros[:, g_idx].astype(np.float32)) * scales[:, g_idx]
    midpoint = (codes - 8.0) * scales[:, g_idx]
    assert np.abs(got - asked).max() > 1
    np.testing.assert_allclose(got, midpoint, atol=1e-4)
