"""L4: onnxruntime-genai runs the saved package and greedy-generates what transformers does.

For tiny Llama and tiny Qwen3 checkpoints written by transformers itself,
``mobius.build(folder, execution_provider=ep).save(out)`` makes a package (ep
"default" and "cpu", the EPs onnxruntime on CPU runs); onnxruntime-genai loads it
(og.Model, og.Tokenizer, og.Generator with do_sample=False) and its greedy
tokens must equal transformers' ``generate(do_sample=False)`` token for token.

Batching: a batch of two prompts of different lengths is compared too, and
must also equal each prompt generated alone. Note the padding conventions
differ and each library is fed its own (see testing/genai_harness.py):
onnxruntime-genai 0.18 expects **right** padding with pad_token_id (what
og.Tokenizer.encode_batch produces; it masks pad tokens and numbers
positions over real tokens only -- a left-padded batch would have its pads
attended to as real tokens), transformers expects left padding plus
attention_mask. Both make every row see exactly its own tokens at positions
0, 1, 2, ..., so the tokens must agree.

EOS: generation is forced to the full 20 tokens on both sides (genai
min_length, transformers min_new_tokens); test_eos_* checks that both
suppress (and, without suppression, stop on) EOS identically by making a
token that greedy decoding does produce the EOS.

transformers' side (checkpoints, tokenizer, greedy runs) is genai_e2e_cases.py, recorded at
build time (//rules:references.bzl).
"""

from __future__ import annotations

import json
import os

import pytest

import onnxruntime_genai as og

import mobius
from mobius.package import genai_e2e_cases as cases
from mobius.package.genai_e2e_cases import NEW_TOKENS, TEXTS, TOKENIZER_TEXTS, file_hashes
from mobius.package.tokenizer_files import TOKENIZER_FILES
from testing import genai_harness as harness
from testing.reference_cases import case_dir

# "default": the portable graph (standard ONNX Attention, separate KV
# buffers: past_present_share_buffer false). "cpu": GroupQueryAttention, for
# which genai_config turns past_present_share_buffer on.
@pytest.fixture(scope="module", params=["default", "cpu"])
def ep(request):
    return request.param


@pytest.fixture(scope="module", params=cases.CASES)
def built(request, ep, tmp_path_factory):
    folder = case_dir(cases, request.param)
    out = tmp_path_factory.mktemp(f"package-{ep}")
    package = mobius.build(os.path.join(folder, "ckpt"), execution_provider=ep).save(str(out))
    tokenizer = og.Tokenizer(og.Model(package))
    prompts = [[int(t) for t in tokenizer.encode(text)] for text in TEXTS]
    assert len(prompts[0]) != len(prompts[1])
    with open(os.path.join(folder, "tokenizer.json")) as f:  # what transformers was run on
        assert prompts == json.load(f)["ids"][:len(TEXTS)]
    return {"package": package, "prompts": prompts, "case": folder}


def _genai(built, prompts, **kwargs):
    return harness.genai_generate(built["package"], prompts, NEW_TOKENS, **kwargs)


def _recorded(built, name: str):
    return os.path.join(built["case"], "runs", name)


def _describe_mismatch(genai_rows, hf_rows, margins):
    lines = []
    for i, (g, h) in enumerate(zip(genai_rows, hf_rows)):
        if g == h:
            continue
        step = next((k for k, (a, b) in enumerate(zip(g, h)) if a != b), min(len(g), len(h)))
        gap = margins[i][step] if step < len(margins[i]) else float("nan")
        lines.append(f"row {i}: first difference at step {step} (transformers top-1/top-2 gap "
                     f"there {gap:.3g})\n  genai        {g}\n  transformers {h}")
    return "\n".join(lines)


def _assert_same_tokens(built, prompts, run: str, **kwargs):
    """genai's rows == transformers' recorded ``run`` (generated from the same prompts: the
    package's tokenizer encodes as transformers does, test_genai_tokenizer_*)."""
    genai_rows = _genai(built, prompts, **kwargs)
    hf_rows, margins = harness.load_hf_generate(_recorded(built, run + ".json"))
    assert genai_rows == hf_rows, _describe_mismatch(genai_rows, hf_rows, margins)
    return genai_rows


@pytest.mark.parametrize("row", [0, 1])
def test_greedy_20_tokens_batch_1(built, row):
    (tokens,) = _assert_same_tokens(built, [built["prompts"][row]], f"row{row}")
    assert len(tokens) == NEW_TOKENS
    # Guards the test's own strength: a checkpoint that only repeats a token
    # would let most bugs through.
    assert len(set(tokens)) >= 5, tokens


def test_greedy_20_tokens_batch_2_different_lengths(built):
    prompts = built["prompts"]
    rows = _assert_same_tokens(built, prompts, "batch")
    assert [len(r) for r in rows] == [NEW_TOKENS, NEW_TOKENS]
    alone = [_genai(built, [p])[0] for p in prompts]
    assert rows == alone


def test_eos_is_suppressed_and_honoured_the_same_way(built):
    prompts = built["prompts"]
    (free,) = _genai(built, prompts[:1])
    # An EOS id that greedy decoding reaches at step k (and not before): the recorded runs
    # took it from transformers' own continuation, which must be genai's.
    with open(_recorded(built, "eos.json")) as f:
        eos = json.load(f)
    assert free == eos["free"]
    k = eos["k"]
    assert k == next(k for k in range(2, NEW_TOKENS) if free[k] not in free[:k])
    overlay = {"model": {"eos_token_id": free[k]}}

    suppressed = _assert_same_tokens(built, prompts, "eos_suppressed", config_overlay=overlay)
    assert [len(r) for r in suppressed] == [NEW_TOKENS, NEW_TOKENS]
    assert suppressed[0][:k] == free[:k] and suppressed[0][k] != free[k]

    stopped = _assert_same_tokens(built, prompts, "eos_stopped", config_overlay=overlay,
                                  suppress_eos=False)
    assert stopped[0] == free[: k + 1]


def test_genai_tokenizer_matches_transformers(built):
    """transformers' tokenizer was recorded on the checkpoint's tokenizer files: the package
    holds the same files, byte for byte."""
    with open(os.path.join(built["case"], "tokenizer.json")) as f:
        reference = json.load(f)
    assert file_hashes(built["package"], TOKENIZER_FILES) == reference["files"]
    model = og.Model(built["package"])
    tokenizer = og.Tokenizer(model)
    for text, expected, decoded in zip(TOKENIZER_TEXTS, reference["ids"], reference["decoded"],
                                       strict=True):
        ids = [int(t) for t in tokenizer.encode(text)]
        assert ids == expected, text
        # genai always drops special tokens when decoding.
        assert tokenizer.decode(ids) == decoded, text
    assert tokenizer.bos_token_id == reference["bos_token_id"]
    assert list(tokenizer.eos_token_ids) == [reference["eos_token_id"]]
    assert tokenizer.pad_token_id == reference["pad_token_id"]

    batch = tokenizer.encode_batch(TEXTS).as_numpy()
    expected, _ = harness.pad_batch(reference["ids"][:len(TEXTS)], reference["pad_token_id"],
                                    "right")
    assert batch.tolist() == expected.tolist()
