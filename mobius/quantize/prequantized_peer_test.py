"""Cross-check with an independent reader: ORT GenAI's model builder on the same checkpoints.

The same synthetic GPTQ / AWQ checkpoint is built by mobius (no --quant,
accuracy level 1) and by ``python -m onnxruntime_genai.models.builder -p int4
-e cpu`` (accuracy_level=1, lm_head kept float; its ``__main__`` run in this
process); both packages run in onnxruntime on the same unpadded batch and must
give the same logits (within 1e-5 of the logit scale) and the same greedy tokens.

Only the checkpoints the peer reads correctly are compared here; where it
does not (docs/prequantized.md, "ORT GenAI's builder on pre-quantized
checkpoints"): asymmetric act-order GPTQ (its MatMulNBits keeps g_idx, whose
CPU kernel then ignores uint8 zero points), a group size that does not divide
the input size, and group size -1 over a non-power-of-two input size.
"""

from __future__ import annotations

import os
import runpy
import sys

import numpy as np
import pytest

from testing import parity
from testing.model_runs import onnx_greedy, ort_session
from testing.prequantized_checkpoints import awq_config, gptq_config, write_prequantized

CASES = {
    "gptq-int4-sym-act-order-g32": gptq_config(4, 32, sym=True, desc_act=True),
    "gptq-int8-asym-g32": gptq_config(8, 32, sym=False),
    "awq-int4-g32": awq_config(32),
}


def _peer_build(folder: str, out: str, cache: str, monkeypatch) -> None:
    """``python -m onnxruntime_genai.models.builder ...``, run in this process (runpy): the
    same entry point without a new interpreter importing torch and transformers per case."""
    argv = ["builder", "-i", folder, "-o", out, "-p", "int4", "-e", "cpu", "-c", cache,
            "--extra_options", "accuracy_level=1", "nodes_to_exclude=/lm_head/MatMul"]
    monkeypatch.setenv("HF_HOME", os.path.join(cache, "hf"))  # hermetic: nothing under ~
    monkeypatch.setattr(sys, "argv", argv)
    runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)
    assert os.path.exists(os.path.join(out, "model.onnx"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_mobius_and_ort_genai_builder_agree(tmp_path, name, monkeypatch):
    from mobius.builder import build

    folder = write_prequantized(str(tmp_path / "ckpt"), str(tmp_path / "ref"), CASES[name],
                                intermediate_size=160, attention_bias=True, mlp_bias=True)
    peer = str(tmp_path / "peer")
    _peer_build(folder, peer, str(tmp_path / "peer-cache"), monkeypatch)
    package = build(folder, execution_provider="cpu", quant_accuracy_level=1,
                    prefill_logits="all")  # the peer returns every position
    ours = package.save(str(tmp_path / "mobius"))
    config = package.config
    ids, mask = parity.make_batch(config.vocab_size, pad=0)
    our_logits, our_tokens = onnx_greedy(ort_session(f"{ours}/model.onnx"), config, ids, mask,
                                         3, np.float32)
    peer_logits, peer_tokens = onnx_greedy(ort_session(f"{peer}/model.onnx"), config, ids, mask,
                                           3, np.float32)
    scale = max(float(np.abs(step).max()) for step in peer_logits)
    diff = max(float(np.abs(a - b).max()) for a, b in zip(our_logits, peer_logits))
    assert diff <= 1e-5 * scale, (diff, scale)
    assert all((a == b).all() for a, b in zip(our_tokens, peer_tokens))
