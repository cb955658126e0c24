"""Text or token classification with a mobius package, onnxruntime and a tokenizer.

    mobius build --model distilbert-base-uncased-finetuned-sst-2-english out/sst2 --ep cpu
    python docs/examples/text_classification.py out/sst2 "I loved it." "Dull and slow."

The label names come from the package (model.onnx metadata ``id2label``). A
sequence classifier prints each text's best label and its softmax score (one
logit, a cross-encoder reranker: the sigmoid); a token classifier prints each
token's label. Needs only onnxruntime, tokenizers and numpy.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnxruntime as ort
from text_inputs import text_feeds  # docs/examples/text_inputs.py, beside this file


def classify(package: str, texts: list[str]) -> tuple[np.ndarray, dict[int, str], dict]:
    """(probabilities [batch, labels] or [batch, tokens, labels], id2label, feeds)."""
    session = ort.InferenceSession(os.path.join(package, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    labels = json.loads(session.get_modelmeta().custom_metadata_map["id2label"])
    feeds = text_feeds(session, package, texts)
    (logits,) = session.run(["logits"], feeds)
    if logits.shape[-1] == 1:  # a single score (reranker): sigmoid, as transformers does
        probabilities = 1 / (1 + np.exp(-logits))
    else:
        shifted = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities = shifted / shifted.sum(-1, keepdims=True)
    return probabilities, {int(k): v for k, v in labels.items()}, feeds


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    package, texts = argv[0], argv[1:]
    probabilities, labels, feeds = classify(package, texts)
    for i, text in enumerate(texts):
        if probabilities.ndim == 2:
            best = int(probabilities[i].argmax())
            print(f"{text!r}: {labels[best]} ({probabilities[i, best]:.4f})")
            continue
        real = feeds["attention_mask"][i].astype(bool)
        tags = [labels[int(j)] for j in probabilities[i][real].argmax(-1)]
        print(f"{text!r}: {' '.join(tags)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
