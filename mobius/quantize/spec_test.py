"""resolve_quant: per-EP defaults from EpCapabilities, and every impossible request
rejected up front (one line naming alternatives), from the API and from the CLI
with nothing written."""

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from safetensors.numpy import load_file

from mobius.cli import main
from mobius.ep.registry import get_ep
from mobius.errors import MobiusError
from mobius.quantize import packing
from mobius.quantize.rtn import quantize_rtn
from mobius.quantize.spec import parse_overrides, resolve_quant
from mobius.tiny.checkpoint import make_tiny_checkpoint


def test_defaults_come_from_the_ep():
    cpu = resolve_quant(get_ep("cpu"), "int4")
    assert (cpu.bits, cpu.block_size, cpu.symmetric, cpu.accuracy_level, cpu.form) == (
        4, 32, True, 4, "matmul_nbits")
    trt = resolve_quant(get_ep("trt-rtx"), "int4")
    assert (trt.block_size, trt.symmetric) == (128, True)
    assert resolve_quant(get_ep("onnx-standard"), "int8").form == "dequantize_linear"
    assert resolve_quant(get_ep("cuda"), "int4").accuracy_level == 0
    assert resolve_quant(get_ep("cpu"), None) is None
    assert cpu.embedding and cpu.lm_head
    # a tied table shares the head's quantized copy where the EP has both kernels
    assert cpu.tied_embedding and resolve_quant(get_ep("webgpu"), "int4").tied_embedding
    dml = resolve_quant(get_ep("dml"), "int4")  # no GatherBlockQuantized kernel
    assert not dml.tied_embedding and not dml.embedding
    kept = resolve_quant(get_ep("cpu"), "int4", embedding=False)
    assert not kept.tied_embedding and not kept.embedding


def test_explicit_options_override_defaults():
    spec = resolve_quant(get_ep("cpu"), "int8", block_size=128, symmetric=False,
                         accuracy_level=1, lm_head=False, embedding=True)
    assert (spec.bits, spec.block_size, spec.symmetric, spec.accuracy_level, spec.lm_head,
            spec.embedding) == (8, 128, False, 1, False, True)


@pytest.mark.parametrize("ep,kwargs,message", [
    ("trt-rtx", dict(quant="int8"), "does not take int8 weights; use int4, or --ep "),
    ("trt-rtx", dict(quant="int4", block_size=32), "block size 32; use 128"),
    ("trt-rtx", dict(quant="int4", symmetric=False), "takes no zero points"),
    ("trt-rtx", dict(quant="int4", overrides="layers.0.*=int8"), "does not take int8"),
    ("cpu", dict(quant="int4", block_size=48), "block size 48; use 16, 32, 64, 128, 256"),
    ("cpu", dict(quant="int4", block_size=512), "block size 512"),
    ("cpu", dict(quant="int3"), "unknown --quant 'int3'"),
    ("cpu", dict(quant=None, block_size=32), "need --quant"),
    ("cpu", dict(quant="int4", accuracy_level=7), "accuracy level must be in 0..4"),
    ("cpu", dict(quant="int4", overrides="layers.0.*=fp8"), "bad --quant-override"),
    ("cpu", dict(quant=None, method="minmax"), "--quant-method.* need --quant"),
    ("cpu", dict(quant="int4", method="gptq"), "--quant-method: unknown method 'gptq'; "
                                                 "expected one of minmax, mse"),
])
def test_rejected_up_front(ep, kwargs, message):
    quant = kwargs.pop("quant")
    with pytest.raises(MobiusError, match=message.replace(".", r"\.").replace("*", r"\*")
                       .replace(r"\.\*", ".*")):
        resolve_quant(get_ep(ep), quant, **kwargs)


def test_alternative_eps_are_named():
    with pytest.raises(MobiusError) as info:
        resolve_quant(get_ep("trt-rtx"), "int8")
    assert "cpu" in str(info.value) and "trt-rtx or" not in str(info.value)


def test_an_ep_without_quantized_forms_names_the_alternatives():
    """qnn: its HTP took neither form mobius emits (docs/eps.md, "QNN")."""
    with pytest.raises(MobiusError, match=r"'qnn' does not take int4 weights; use float "
                                          r"weights, or --ep .*openvino"):
        resolve_quant(get_ep("qnn"), "int4")


def test_overrides_first_match_wins_on_a_dotted_suffix():
    spec = resolve_quant(get_ep("cpu"), "int4",
                         overrides=parse_overrides("layers.0.*=float,lm_head=int8,*mlp*=int8"))
    assert spec.bits_for("model.layers.0.mlp.up_proj.weight") is None
    assert spec.bits_for("model.layers.10.mlp.up_proj.weight") == 8
    assert spec.bits_for("model.layers.1.self_attn.q_proj.weight") == 4
    assert spec.bits_for("lm_head.weight") == 8
    assert resolve_quant(get_ep("cpu"), "int4", lm_head=False).bits_for("lm_head.weight") is None


@pytest.mark.parametrize("argv", [
    ["--ep", "trt-rtx", "--quant", "int8"],
    ["--ep", "trt-rtx", "--quant", "int4", "--quant-block-size", "64"],
    ["--ep", "trt-rtx", "--quant", "int4", "--quant-asymmetric"],
    ["--ep", "cpu", "--quant", "int4", "--quant-block-size", "24"],
])
def test_cli_rejects_and_writes_nothing(tmp_path, capsys, argv):
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    out = tmp_path / "out"
    assert main(["build", "--model", folder, str(out), *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mobius: error: --quant"), err
    assert f"EP '{argv[1]}'" in err[0]
    assert not os.path.exists(out)


@pytest.mark.parametrize("method", ["minmax", "mse"])
def test_cli_method_reaches_every_block(tmp_path, method):
    """--quant-method (asymmetric, where the two methods differ) decides the package's
    o_proj codes, scales and zero points exactly as quantize_rtn does on the checkpoint."""
    folder = make_tiny_checkpoint("tiny-llama", str(tmp_path / "ckpt"))
    out = tmp_path / "out"
    assert main(["build", "--model", folder, str(out), "--ep", "cpu", "--quant", "int4",
                 "--quant-asymmetric", "--quant-method", method, "-q"]) == 0
    weight = load_file(os.path.join(folder, "model.safetensors"))[
        "model.layers.0.self_attn.o_proj.weight"]
    want = quantize_rtn(weight, 4, 32, False, method)
    other = quantize_rtn(weight, 4, 32, False, "mse" if method == "minmax" else "minmax")
    stored = {t.name: t for t in onnx.load(str(out / "model.onnx")).graph.initializer}
    stem = "model.layers.0.self_attn.o_proj"
    scales = numpy_helper.to_array(stored[f"{stem}_scales"])
    np.testing.assert_array_equal(scales, want.scales)
    assert not np.array_equal(scales, other.scales)  # the methods differ on these weights
    np.testing.assert_array_equal(numpy_helper.to_array(stored[f"{stem}_Q"]),
                                  packing.matmul_nbits_b(want))
    np.testing.assert_array_equal(numpy_helper.to_array(stored[f"{stem}_zero_points"]),
                                  packing.matmul_nbits_zero_points(want))
