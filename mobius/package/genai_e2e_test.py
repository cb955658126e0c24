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
"""

from __future__ import annotations

import pytest

import onnxruntime_genai as og

import mobius
from testing import genai_harness as harness
from testing.hf_checkpoints import make_hf_checkpoint

NEW_TOKENS = 20

# With transformers' default initializer_range (0.02) the tied-embedding
# Qwen3 checkpoint degenerates to repeating the last prompt token forever (the
# residual stream is ~ the input embedding, whose best match under the tied
# LM head is itself), and the Llama one ends in a loop after a few steps with
# a top-1/top-2 logit gap of ~5e-5 at one step. 0.2 gives varied
# continuations with gaps >= ~3e-3, far above ORT-vs-torch float32 noise.
CHECKPOINT_OVERRIDES = {"initializer_range": 0.2}

# Tiny models run fastest single-threaded, and so do not slow to a crawl
# when the machine is busy with other tests.
THREADS = 1

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Once upon a time there was",
]


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3"])
def checkpoint(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param) / "checkpoint"
    make_hf_checkpoint(str(folder), request.param, **CHECKPOINT_OVERRIDES)
    return str(folder), harness.load_hf_model(str(folder))


# "default": the portable graph (standard ONNX Attention, separate KV
# buffers: past_present_share_buffer false). "cpu": GroupQueryAttention, for
# which genai_config turns past_present_share_buffer on.
@pytest.fixture(scope="module", params=["default", "cpu"])
def built(request, checkpoint, tmp_path_factory):
    folder, hf_model = checkpoint
    out = tmp_path_factory.mktemp(f"package-{request.param}")
    package = mobius.build(folder, execution_provider=request.param).save(str(out))
    tokenizer = og.Tokenizer(og.Model(package))
    prompts = [[int(t) for t in tokenizer.encode(text)] for text in TEXTS]
    assert len(prompts[0]) != len(prompts[1])
    return {"package": package, "hf_model": hf_model, "prompts": prompts}


def _genai(built, prompts, **kwargs):
    return harness.genai_generate(built["package"], prompts, NEW_TOKENS,
                                  intra_op_num_threads=THREADS, **kwargs)


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


def _assert_same_tokens(built, prompts, **kwargs):
    genai_rows = _genai(built, prompts, **kwargs)
    hf_kwargs = {k: v for k, v in kwargs.items() if k == "suppress_eos"}
    if "config_overlay" in kwargs:
        hf_kwargs["eos_token_id"] = kwargs["config_overlay"]["model"]["eos_token_id"]
    hf_rows, margins = harness.hf_generate(built["hf_model"], prompts, NEW_TOKENS,
                                           return_margins=True, **hf_kwargs)
    assert genai_rows == hf_rows, _describe_mismatch(genai_rows, hf_rows, margins)
    return genai_rows


@pytest.mark.parametrize("row", [0, 1])
def test_greedy_20_tokens_batch_1(built, row):
    (tokens,) = _assert_same_tokens(built, [built["prompts"][row]])
    assert len(tokens) == NEW_TOKENS
    # Guards the test's own strength: a checkpoint that only repeats a token
    # would let most bugs through.
    assert len(set(tokens)) >= 5, tokens


def test_greedy_20_tokens_batch_2_different_lengths(built):
    prompts = built["prompts"]
    rows = _assert_same_tokens(built, prompts)
    assert [len(r) for r in rows] == [NEW_TOKENS, NEW_TOKENS]
    alone = [_genai(built, [p])[0] for p in prompts]
    assert rows == alone


def test_eos_is_suppressed_and_honoured_the_same_way(built):
    prompts = built["prompts"]
    (free,) = _genai(built, prompts[:1])
    # An EOS id that greedy decoding reaches at step k (and not before).
    k = next(k for k in range(2, NEW_TOKENS) if free[k] not in free[:k])
    overlay = {"model": {"eos_token_id": free[k]}}

    suppressed = _assert_same_tokens(built, prompts, config_overlay=overlay)
    assert [len(r) for r in suppressed] == [NEW_TOKENS, NEW_TOKENS]
    assert suppressed[0][:k] == free[:k] and suppressed[0][k] != free[k]

    stopped = _assert_same_tokens(built, prompts, config_overlay=overlay, suppress_eos=False)
    assert stopped[0] == free[: k + 1]


def test_genai_tokenizer_matches_transformers(built):
    import transformers

    model = og.Model(built["package"])
    tokenizer = og.Tokenizer(model)
    reference = transformers.AutoTokenizer.from_pretrained(built["package"])
    texts = TEXTS + [
        "Hello, wörld! 你好 🙂  two  spaces\n newline\ttab",
        " leading space, 0123456789 + 42 = 4242;",
        "mobius builds ONNX packages </s> with <s> specials <pad>",
    ]
    for text in texts:
        ids = [int(t) for t in tokenizer.encode(text)]
        assert ids == reference.encode(text), text
        # genai always drops special tokens when decoding.
        assert tokenizer.decode(ids) == reference.decode(ids, skip_special_tokens=True), text
    assert tokenizer.bos_token_id == reference.bos_token_id
    assert list(tokenizer.eos_token_ids) == [reference.eos_token_id]
    assert tokenizer.pad_token_id == reference.pad_token_id

    batch = tokenizer.encode_batch(TEXTS).as_numpy()
    expected, _ = harness.pad_batch([reference.encode(t) for t in TEXTS],
                                    reference.pad_token_id, "right")
    assert batch.tolist() == expected.tolist()
