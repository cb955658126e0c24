"""Sentence embeddings with a mobius feature-extraction package, onnxruntime and a tokenizer.

    mobius build --model sentence-transformers/all-MiniLM-L6-v2 out/minilm --ep cpu
    python docs/examples/sentence_embeddings.py out/minilm "A cat sits." "A dog runs."

The package of a sentence-transformers checkpoint has a ``sentence_embedding``
output (pooled, normalized if the checkpoint says so); this prints it and the
cosine similarity of every pair. Needs only onnxruntime, tokenizers and numpy.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer


def load_tokenizer(package: str) -> Tokenizer:
    """tokenizer.json with padding and truncation as tokenizer_config.json says."""
    tokenizer = Tokenizer.from_file(os.path.join(package, "tokenizer.json"))
    config_path = os.path.join(package, "tokenizer_config.json")
    config = {}
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    pad = config.get("pad_token") or "[PAD]"
    pad = pad["content"] if isinstance(pad, dict) else pad
    tokenizer.enable_padding(pad_id=tokenizer.token_to_id(pad), pad_token=pad)
    max_length = config.get("model_max_length")
    if isinstance(max_length, int) and max_length < 1_000_000:
        tokenizer.enable_truncation(max_length)
    return tokenizer


def embed(package: str, sentences: list[str]) -> dict[str, np.ndarray]:
    """The package's outputs for a right-padded batch of ``sentences``, by name."""
    session = ort.InferenceSession(os.path.join(package, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    encodings = load_tokenizer(package).encode_batch(sentences)
    available = {
        "input_ids": np.array([e.ids for e in encodings], np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], np.int64),
    }
    feeds = {i.name: available[i.name] for i in session.get_inputs()}
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    package, sentences = argv[0], argv[1:]
    outputs = embed(package, sentences)
    vectors = outputs.get("sentence_embedding")
    if vectors is None:
        print("this package has no sentence_embedding output (not a sentence-transformers "
              "checkpoint); last_hidden_state is", outputs["last_hidden_state"].shape)
        return 1
    unit = vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)
    for i, sentence in enumerate(sentences):
        print(f"{sentence!r}: {np.array2string(vectors[i][:4], precision=4)}...")
    for i in range(len(sentences)):
        for j in range(i + 1, len(sentences)):
            print(f"cosine({i}, {j}) = {float(unit[i] @ unit[j]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
