"""transformers.js runs ``mobius build --ep webgpu --layout transformers.js`` folders.

The folder is loaded as a local model with no edits. Greedy
``pipeline('text-generation')`` must produce the tokens and text of Python
transformers on the same tiny checkpoint; ``pipeline('feature-extraction')``
must give transformers' last hidden state for a BERT encoder. f32 only: the
q4 files need int4 quantization (not on main yet).
"""

import os

import numpy as np
import pytest

from mobius.cli import main as mobius_main
from testing import ep_suite
from testing.js.node import run_node
from testing.model_runs import make_family_checkpoint

PROMPT = "The quick brown fox jumps over"
NEW_TOKENS = 10
#: Weights this large make greedy decoding of a random model leave the prompt's
#: last token (tied-embedding Qwen3 and Gemma repeat it at the default 0.02).
INIT_RANGE = 0.5


def _checkpoint(tmp_path, family: str) -> str:
    from testing.hf_checkpoints import make_hf_checkpoint

    preset = ep_suite.family(family).tiny_preset
    return make_hf_checkpoint(str(tmp_path / "ckpt"), preset, initializer_range=INIT_RANGE)


def _build(checkpoint: str, out: str) -> str:
    argv = ["build", "--model", checkpoint, out, "--ep", "webgpu", "--layout", "transformers.js",
            "--quiet"]
    assert mobius_main(argv) == 0
    return out


def _reference_generation(checkpoint: str) -> tuple[list[int], str]:
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    inputs = tokenizer(PROMPT, return_tensors="pt")
    with torch.no_grad():
        ids = model.generate(**inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    generator = transformers.pipeline("text-generation", model=model, tokenizer=tokenizer)
    text = generator(PROMPT, max_new_tokens=NEW_TOKENS, do_sample=False,
                     return_full_text=False)[0]["generated_text"]
    return ids[0].tolist(), text


@pytest.mark.parametrize("family", [
    pytest.param(name, marks=pytest.mark.shard_group(name))
    for name in ("llama", "qwen3", "gemma", "phi3")])
def test_text_generation_matches_transformers(tmp_path, family):
    checkpoint = _checkpoint(tmp_path, family)
    folder = _build(checkpoint, str(tmp_path / "models" / family))
    got = run_node("transformers_runner.mjs", "generate", folder, str(tmp_path / "cache"),
                   PROMPT, str(NEW_TOKENS))
    tokens, text = _reference_generation(checkpoint)
    assert len(set(tokens[-NEW_TOKENS:])) >= NEW_TOKENS // 2, tokens  # not a degenerate repeat
    assert got["tokens"] == tokens
    assert got["text"] == text


@pytest.mark.shard_group("bert")
def test_feature_extraction_matches_transformers(tmp_path):
    import torch
    import transformers

    checkpoint = make_family_checkpoint(str(tmp_path / "ckpt"), ep_suite.family("bert"))
    folder = _build(checkpoint, str(tmp_path / "models" / "bert"))
    got = run_node("transformers_runner.mjs", "embed", folder, str(tmp_path / "cache"), PROMPT)
    extractor = transformers.pipeline("feature-extraction", model=checkpoint,
                                      dtype=torch.float32)
    expected = np.asarray(extractor(PROMPT), np.float32)
    assert got["dims"] == list(expected.shape)
    np.testing.assert_allclose(np.asarray(got["data"], np.float32).reshape(expected.shape),
                               expected, atol=1e-4)
