"""Fill in masked tokens with a mobius fill-mask package, onnxruntime and a tokenizer.

    mobius build --model distilroberta-base out/distilroberta --ep cpu
    python docs/examples/fill_mask.py out/distilroberta "Paris is the <mask> of France."

Prints the ``--top`` (default 5) most likely tokens for each mask token, with their
softmax scores. Needs only onnxruntime, tokenizers and numpy.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnxruntime as ort
from text_inputs import load_tokenizer, text_feeds  # docs/examples/text_inputs.py


def mask_token(package: str) -> str:
    with open(os.path.join(package, "tokenizer_config.json"), encoding="utf-8") as f:
        token = json.load(f).get("mask_token") or "[MASK]"
    return token["content"] if isinstance(token, dict) else token


def fill(package: str, texts: list[str], top: int = 5) -> list[list[list[tuple[int, str, float]]]]:
    """Per text, per mask position (in order): the ``top`` (token id, token, score)."""
    session = ort.InferenceSession(os.path.join(package, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    tokenizer = load_tokenizer(package)
    mask_id = tokenizer.token_to_id(mask_token(package))
    feeds = text_feeds(session, package, texts)
    (logits,) = session.run(["logits"], feeds)
    results = []
    for row, ids in zip(logits, feeds["input_ids"]):
        per_mask = []
        for position in np.flatnonzero(ids == mask_id):
            scores = np.exp(row[position] - row[position].max())
            scores /= scores.sum()
            best = np.argsort(-scores)[:top]
            per_mask.append([(int(i), tokenizer.id_to_token(int(i)), float(scores[i]))
                             for i in best])
        results.append(per_mask)
    return results


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    package, texts = argv[0], argv[1:]
    for text, masks in zip(texts, fill(package, texts)):
        for i, candidates in enumerate(masks):
            shown = ", ".join(f"{token!r} {score:.4f}" for _, token, score in candidates)
            print(f"{text!r} mask {i}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
