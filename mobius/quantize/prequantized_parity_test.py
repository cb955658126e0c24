"""L3 parity of GPTQ / AWQ packages against the float model their integers stand for.

Each checkpoint is packed by testing/prequantized_checkpoints.py (real
safetensors + config.json with quantization_config, every tensor random,
biases included). mobius builds it with no --quant (the packed Linears keep
their integers, the lm_head stays float) at accuracy level 1 (f32
activations); transformers runs the same model with the exact dequantized
float weights. The logits must agree within 1e-5 of the logit scale, which
only holds if no weight was requantized.

Batches are unpadded: the CPU EP's fused attention differs from transformers
on left-padded decode steps for float builds too (ep/parity_suite.py checks
padding against the generic graph instead).
"""

from __future__ import annotations

import logging
import os

import numpy as np
import onnx
import pytest

from mobius.quantize import prequantized_parity_cases as cases
from mobius.quantize.prequantized_parity_cases import PAD, PREQUANTIZED, STEPS
from testing import decoder_reference
from testing.model_runs import BuiltPackage, f32_parity
from testing.reference_cases import case_dir

LINEARS = 14  # 2 layers x (q, k, v, o, gate, up, down); the lm_head stays float
PARAMS = [(name, ep) for name, (_, eps, _) in PREQUANTIZED.items() for ep in eps]


def _checkpoint(name: str) -> str:
    return os.path.join(case_dir(cases, name), "ckpt")


def _session(path: str):
    """CPU session; DequantizeLinear+MatMul is fused by ORT into MatMulNBits at its
    default accuracy level 4 (int8 activations) unless told otherwise."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name, ep", PARAMS)
def test_prequantized_logits_match_the_dequantized_float_model(tmp_path, caplog, name, ep):
    from mobius.builder import build

    folder = _checkpoint(name)
    with caplog.at_level(logging.WARNING, "mobius.quantize.prequantized"):
        package = build(folder, execution_provider=ep, quant_accuracy_level=1,
                        prefill_logits="all")  # every position compared
        path = package.save(str(tmp_path / "onnx"))
    assert not caplog.records, [r.message for r in caplog.records]  # nothing requantized
    reference = decoder_reference.load(os.path.join(case_dir(cases, name), "reference.npz"))
    run = f32_parity(BuiltPackage(path, package.config, "f32"), reference,
                     session=_session(f"{path}/model.onnx"), pad=PAD, steps=STEPS)
    scale = max(float(np.abs(step).max()) for step in run.hf_steps)
    assert run.max_abs_diff <= 1e-5 * scale, (run.max_abs_diff, scale)
    _check_ops(onnx.load(f"{path}/model.onnx", load_external_data=False), name, ep)


def _check_ops(model, name: str, ep: str) -> None:
    ops = [(n.domain or "", n.op_type) for n in model.graph.node]
    count = {op: ops.count(op) for op in set(ops)}
    quantized = LINEARS - 4 if ep == "cpu" else LINEARS  # the CPU EP packs Q/K/V into one
    if ep == "onnx-standard":
        assert count.get(("", "DequantizeLinear")) == quantized
        assert not any(domain == "com.microsoft" for domain, _ in ops)
    else:
        assert count.get(("com.microsoft", "MatMulNBits")) == quantized
    if "act-order" in name:  # one Gather per (input, act-order): qkv, o, gate/up, down
        gathers = [n for n in model.graph.node if n.op_type == "Gather"
                   and n.name.endswith("/act_order")]
        assert len(gathers) == 4 * 2
    else:
        assert not any(n.name.endswith("/act_order") for n in model.graph.node)


def test_every_ep_builds_an_act_order_gptq_checkpoint(tmp_path):
    """L1: every registered EP (f32 where it has it, else f16); the full ONNX checker
    passes and every packed Linear became the EP's quantized form (trt-rtx:
    requantized, no zero points)."""
    from mobius.builder import build
    from mobius.ep.registry import ep_registry
    from mobius.errors import MobiusError
    from mobius.weights.dtypes import SHORT_NAMES

    folder = _checkpoint("gptq-int4-asym-act-order-g32")
    for caps in ep_registry:
        dtype = SHORT_NAMES[sorted(caps.dtypes, key=lambda d: SHORT_NAMES[d])[-1]]
        if not caps.quant_bits:  # no quantized MatMul at all (qnn): refused up front, by name
            with pytest.raises(MobiusError, match=f"EP '{caps.name}' does not take int4"):
                build(folder, execution_provider=caps.name, dtype=dtype)
            continue
        path = build(folder, execution_provider=caps.name, dtype=dtype).save(
            str(tmp_path / caps.name))
        model = onnx.load(f"{path}/model.onnx")
        onnx.checker.check_model(model, full_check=True)
        ops = [n.op_type for n in model.graph.node]
        form = "DequantizeLinear" if caps.quant_form == "dequantize_linear" else "MatMulNBits"
        assert ops.count(form) in (LINEARS, LINEARS - 4), (caps.name, dtype)
        if not caps.quant_zero_points:
            assert all(len(n.input) == 3 for n in model.graph.node if n.op_type == form)
