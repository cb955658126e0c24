"""``mobius verify`` for a decoder: logits at every position of the fixed prompts (fed
token by token through onnxruntime-genai, the runtime the package is for) against
transformers' on the same ids, greedy-token agreement, and the quality change on the
built-in text (mean KL of the next-token distributions, perplexity, top-1 agreement)."""

from __future__ import annotations

import numpy as np

from mobius.trial.comparison import PROMPTS, QUALITY_TEXT, Check, max_diff_check
from mobius.trial.package import Package

#: greedy tokens generated per prompt on both sides (EOS suppressed on both)
NEW_TOKENS = 8
#: a quantized decoder fails above this mean KL (nats per token) to the float model: int4 on
#: the hardest real weights measured here (SmolLM2-135M, docs/quantization.md) gives 0.5-0.8,
#: a broken package (wrong scales, swapped blocks) one comparable to ln(vocab)
QUANT_KL_LIMIT = 2.0


def check_decoder(package: Package, checkpoint: str, torch, transformers) -> list[Check]:
    import onnxruntime_genai as og

    model = og.Model(package.folder)
    tokenizer = og.Tokenizer(model)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=torch.float32).eval()
    diff = scale = 0.0
    agree = 0
    for prompt in PROMPTS:
        ids = [int(i) for i in tokenizer.encode(prompt)]
        ours, theirs = _forced_logits(og, model, ids), _hf_logits(torch, hf, ids)
        diff = max(diff, float(np.abs(ours - theirs).max()))
        scale = max(scale, float(np.abs(theirs).max()))
        agree += _common_prefix(_greedy(og, model, ids), _hf_greedy(torch, hf, ids))
    total = NEW_TOKENS * len(PROMPTS)
    checks = [max_diff_check("logits", diff, scale, package, len(PROMPTS)),
              Check(f"greedy tokens: {agree} of {total} equal ({len(PROMPTS)} prompts x "
                    f"{NEW_TOKENS}, compared up to the first difference)")]
    ids = [int(i) for i in tokenizer.encode(QUALITY_TEXT)]
    return checks + [_quality(package, _forced_logits(og, model, ids), _hf_logits(torch, hf, ids),
                              ids)]


def _forced_logits(og, model, ids: list[int]) -> np.ndarray:
    """The package's next-token logits after each prefix of ``ids`` [len, vocab]: one token
    at a time, so a package computing the last position's logits only gives every row."""
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=len(ids))
    generator = og.Generator(model, params)
    rows = []
    for token in ids:
        generator.append_tokens([token])
        # get_logits: the last position's, as float32 (get_output has no bf16 in numpy)
        logits = np.asarray(generator.get_logits(), np.float64)
        rows.append(logits.reshape(-1, logits.shape[-1])[-1])
    return np.stack(rows)


def _hf_logits(torch, hf, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].double().numpy()


def _greedy(og, model, ids: list[int]) -> list[int]:
    params = og.GeneratorParams(model)
    length = len(ids) + NEW_TOKENS
    params.set_search_options(do_sample=False, max_length=length, min_length=length)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    new = []
    while not generator.is_done():
        generator.generate_next_token()
        new.append(int(generator.get_next_tokens()[0]))
    return new


def _hf_greedy(torch, hf, ids: list[int]) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=int),
                          max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    return [int(t) for t in out[0, len(ids):]]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def _quality(package: Package, ours: np.ndarray, theirs: np.ndarray, ids: list[int]) -> Check:
    """Mean KL(transformers || package) per token, both perplexities on the text's next
    tokens, top-1 agreement; held to QUANT_KL_LIMIT for a quantized package."""
    p, q = _log_softmax(theirs), _log_softmax(ours)
    kl = float((np.exp(p) * (p - q)).sum(-1).mean())
    nxt = np.array(ids[1:])
    rows = np.arange(len(nxt))
    ppl_ours = float(np.exp(-q[rows, nxt].mean()))
    ppl_theirs = float(np.exp(-p[rows, nxt].mean()))
    top1 = int((ours.argmax(-1) == theirs.argmax(-1)).sum())
    text = (f"quality on the built-in text ({len(ids)} tokens): KL {kl:.4f} nats/token, "
            f"perplexity {ppl_ours:.4g} (transformers {ppl_theirs:.4g}), top-1 equal "
            f"{top1}/{len(ids)}")
    if not package.quant:
        return Check(text)
    return Check(text + f" (limit KL {QUANT_KL_LIMIT})", kl <= QUANT_KL_LIMIT)
