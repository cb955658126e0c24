"""Zero-shot image classification with a CLIP / SigLIP mobius package and onnxruntime.

    mobius build --model openai/clip-vit-base-patch32 out/clip --ep cpu
    python docs/examples/zero_shot_image_classification.py out/clip cat.jpg \\
        --labels cat dog car

The package is one graph holding both towers: it takes the label prompts
(``"This is a photo of {label}."``) as input_ids and the images as pixel_values,
and returns logits_per_image [images, labels]. CLIP's scores are a softmax over
the labels; SigLIP's are independent sigmoids (its graph has no attention_mask:
prompts are padded to a fixed length, 64 as transformers' pipeline does). The
image preprocessing is docs/examples/image_classification.py's; the tokenizer
is the package's. Needs only onnxruntime, tokenizers, Pillow and numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort

from image_classification import pixel_values  # docs/examples/, beside this file
from text_inputs import load_tokenizer

TEMPLATE = "This is a photo of {}."


def text_feeds(session, package: str, prompts: list[str], max_length: int) -> dict:
    """input_ids (+ attention_mask where the graph takes one: CLIP, padded to the longest)."""
    tokenizer = load_tokenizer(package)
    names = {i.name for i in session.get_inputs()}
    if "attention_mask" not in names:  # SigLIP: a fixed length, no mask
        tokenizer.enable_truncation(max_length)
        padding = tokenizer.padding
        tokenizer.enable_padding(pad_id=padding["pad_id"], pad_token=padding["pad_token"],
                                 length=max_length)
    encodings = tokenizer.encode_batch(prompts)
    feeds = {"input_ids": np.array([e.ids for e in encodings], np.int64)}
    if "attention_mask" in names:
        feeds["attention_mask"] = np.array([e.attention_mask for e in encodings], np.int64)
    return feeds


def classify(package: str, paths: list[str], labels: list[str], template: str = TEMPLATE,
             max_length: int = 64) -> np.ndarray:
    """Scores [images, labels]: softmax (CLIP) or sigmoid (SigLIP) of logits_per_image."""
    session = ort.InferenceSession(os.path.join(package, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    with open(os.path.join(package, "preprocessor_config.json")) as f:
        processor = json.load(f)
    feeds = text_feeds(session, package, [template.format(label) for label in labels],
                       max_length)
    pixels = pixel_values(processor, paths)
    pixel_input = next(i for i in session.get_inputs() if i.name == "pixel_values")
    feeds["pixel_values"] = pixels.astype(np.float16 if "float16" in pixel_input.type
                                          else np.float32)
    (logits,) = session.run(["logits_per_image"], feeds)
    logits = logits.astype(np.float32)
    if "attention_mask" not in feeds:  # SigLIP: each label on its own
        return 1.0 / (1.0 + np.exp(-logits))
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("images", nargs="+")
    parser.add_argument("--labels", nargs="+", required=True)
    parser.add_argument("--template", default=TEMPLATE)
    parser.add_argument("--max-length", type=int, default=64,
                        help="prompt length for graphs without attention_mask (SigLIP)")
    args = parser.parse_args(argv)
    scores = classify(args.package, args.images, args.labels, args.template, args.max_length)
    for path, row in zip(args.images, scores):
        best = np.argsort(-row)
        print(f"{path}: " + ", ".join(f"{args.labels[i]} ({row[i]:.4f})" for i in best))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
