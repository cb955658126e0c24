"""Cross-check with an independent reader: ORT GenAI's model builder on the same checkpoints.

The same synthetic GPTQ / AWQ checkpoint is built by mobius (no --quant,
accuracy level 1) and by ``python -m onnxruntime_genai.models.builder -p int4
-e cpu`` (accuracy_level=1, lm_head kept float; run at build time by
prequantized_peer_cases.py, since the builder imports torch and transformers);
both packages run in onnxruntime on the same unpadded batch and must give the
same logits (within 1e-5 of the logit scale) and the same greedy tokens.

Only the checkpoints the peer reads correctly are compared here; where it
does not (docs/prequantized.md, "ORT GenAI's builder on pre-quantized
checkpoints"): asymmetric act-order GPTQ (its MatMulNBits keeps g_idx, whose
CPU kernel then ignores uint8 zero points), a group size that does not divide
the input size, and group size -1 over a non-power-of-two input size.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from mobius.quantize import prequantized_peer_cases as cases
from testing import parity
from testing.model_runs import onnx_greedy, ort_session
from testing.reference_cases import case_dir


@pytest.mark.parametrize("name", cases.CASES)
def test_mobius_and_ort_genai_builder_agree(tmp_path, name):
    from mobius.builder import build

    folder = os.path.join(case_dir(cases, name), "ckpt")
    peer = os.path.join(case_dir(cases, name), "peer")
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
