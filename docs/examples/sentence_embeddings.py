"""Sentence embeddings with a mobius feature-extraction package, onnxruntime and a tokenizer.

    mobius build --model sentence-transformers/all-MiniLM-L6-v2 out/minilm --ep cpu
    python docs/examples/sentence_embeddings.py out/minilm "A cat sits." "A dog runs."

The package of a sentence-transformers checkpoint has a ``sentence_embedding``
output (pooled, normalized if the checkpoint says so); this prints it and the
cosine similarity of every pair. Needs only onnxruntime, tokenizers and numpy.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
from text_inputs import text_feeds  # docs/examples/text_inputs.py, beside this file


def embed(package: str, sentences: list[str]) -> dict[str, np.ndarray]:
    """The package's outputs for a right-padded batch of ``sentences``, by name."""
    session = ort.InferenceSession(os.path.join(package, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    feeds = text_feeds(session, package, sentences)
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
