"""Runs of real-weights packages, shared by the real-weights tests: a causal LM's prefill
logits and sentence embeddings in onnxruntime, and the figures that compare them with the
references (transformers, sentence-transformers) that real_smollm2_cases and
real_minilm_cases recorded at build time.

Every prefill here is a batch of equal-length rows (no padding): the padding
conventions are the tiny-checkpoint suites' business; these runs measure the weights.
"""

from __future__ import annotations

import json

import numpy as np


def ort_session(model_path: str):
    import onnxruntime as ort

    return ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])


def ort_prefill_logits(session, rows) -> np.ndarray:
    """Float32 logits of one prefill of ``rows`` (equal-length token-id lists) from an empty
    KV cache: [batch, 1 or sequence, vocab], as the package's prefill_logits keeps them."""
    ids = np.asarray(rows, dtype=np.int64)
    batch, seq = ids.shape
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids),
             "position_ids": np.tile(np.arange(seq, dtype=np.int64), (batch, 1))}
    for spec in session.get_inputs():
        if spec.name.startswith("past_key_values."):
            _, heads, _, head_dim = spec.shape
            feeds[spec.name] = np.zeros((batch, heads, 0, head_dim), np.float32)
    wanted = {i.name for i in session.get_inputs()}
    (logits,) = session.run(["logits"], {k: v for k, v in feeds.items() if k in wanted})
    return logits.astype(np.float32)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def mean_kl(reference_logits: np.ndarray, logits: np.ndarray) -> float:
    """Mean KL(reference || other) in nats per position of two next-token distributions:
    how much information a quantized model loses against its float one at each step."""
    p_log, q_log = log_softmax(reference_logits), log_softmax(logits)
    return float((np.exp(p_log) * (p_log - q_log)).sum(-1).mean())


def top1_agreement(reference_logits: np.ndarray, logits: np.ndarray) -> float:
    return float((reference_logits.argmax(-1) == logits.argmax(-1)).mean())


def ort_sentence_embeddings(package_dir: str, sentences: list[str],
                            reference: dict[str, np.ndarray]) -> np.ndarray:
    """The package's ``sentence_embedding`` for ``sentences``, tokenized by the package's own
    tokenizer in one right-padded batch (padding and pooling are part of what is tested),
    which must equal transformers' tokenization in ``reference`` (real_minilm_cases)."""
    feeds = package_tokens(package_dir, sentences)
    assert sorted(feeds) == sorted(k for k in reference if k != "embeddings"), sorted(feeds)
    for name, ids in feeds.items():
        np.testing.assert_array_equal(ids, reference[name], err_msg=name)
    session = ort_session(f"{package_dir}/model.onnx")
    wanted = {i.name for i in session.get_inputs()}
    (embeddings,) = session.run(["sentence_embedding"],
                                {k: v for k, v in feeds.items() if k in wanted})
    return embeddings.astype(np.float32)


def package_tokens(package_dir: str, sentences: list[str]) -> dict[str, np.ndarray]:
    """The package's tokenizer.json (the tokenizers library, no torch) run as transformers'
    ``tokenizer(sentences, padding=True)`` runs it: padded to the longest, not truncated."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(f"{package_dir}/tokenizer.json")
    with open(f"{package_dir}/tokenizer_config.json") as f:
        pad = json.load(f)["pad_token"]
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad), pad_token=pad)
    tokenizer.no_truncation()
    rows = tokenizer.encode_batch(sentences)
    return {name: np.array([getattr(row, field) for row in rows], np.int64)
            for name, field in (("input_ids", "ids"), ("token_type_ids", "type_ids"),
                                ("attention_mask", "attention_mask"))}


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two [n, dim] arrays."""
    a = a / np.linalg.norm(a, axis=-1, keepdims=True)
    b = b / np.linalg.norm(b, axis=-1, keepdims=True)
    return (a * b).sum(-1)


def top_k_order(queries: np.ndarray, corpus: np.ndarray, k: int) -> list[list[int]]:
    """For each query embedding, the indices of the ``k`` most similar corpus rows (by
    cosine), best first: what a retrieval application shows its user."""
    q = queries / np.linalg.norm(queries, axis=-1, keepdims=True)
    c = corpus / np.linalg.norm(corpus, axis=-1, keepdims=True)
    return [list(map(int, np.argsort(-row, kind="stable")[:k])) for row in q @ c.T]
