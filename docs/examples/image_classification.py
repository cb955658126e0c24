"""Image classification with a mobius package, onnxruntime and its image processor.

    mobius build --model google/vit-base-patch16-224 out/vit --ep cpu
    python docs/examples/image_classification.py out/vit cat.jpg dog.png

The package's preprocessor_config.json says how an image becomes pixel_values
(RGB, resize, centre crop, rescale, normalize); this file applies it with Pillow
and numpy as transformers' image processors do. The label names come from the
package (model.onnx metadata ``id2label``). Prints each image's best labels and
softmax scores. Needs only onnxruntime, Pillow and numpy.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import onnxruntime as ort
from PIL import Image


def _resize(image: Image.Image, size: dict, resample: int) -> Image.Image:
    if "shortest_edge" in size:  # the short side to size, the aspect ratio kept
        short, width, height = size["shortest_edge"], *image.size
        if width <= height:
            width, height = short, int(short * height / width)
        else:
            width, height = int(short * width / height), short
        return image.resize((width, height), resample=resample)
    return image.resize((size["width"], size["height"]), resample=resample)


def _center_crop(image: Image.Image, crop: dict) -> Image.Image:
    width, height = image.size
    top, left = (height - crop["height"]) // 2, (width - crop["width"]) // 2
    return image.crop((left, top, left + crop["width"], top + crop["height"]))


def pixel_values(processor: dict, paths: list[str]) -> np.ndarray:
    """[images, 3, height, width] float32, as the processor config prescribes."""
    batch = []
    for path in paths:
        image = Image.open(path).convert("RGB")
        if processor.get("do_resize", True):
            image = _resize(image, processor["size"], processor.get("resample", 2))
        if processor.get("do_center_crop"):
            image = _center_crop(image, processor["crop_size"])
        array = np.asarray(image, dtype=np.float32)
        if processor.get("do_rescale", True):
            array = array * np.float32(processor.get("rescale_factor", 1 / 255))
        if processor.get("do_normalize", True):
            array = (array - np.float32(processor["image_mean"])) / np.float32(
                processor["image_std"])
        batch.append(array.transpose(2, 0, 1))
    return np.stack(batch).astype(np.float32)


def classify(package: str, paths: list[str]) -> tuple[np.ndarray, dict[int, str]]:
    """(softmax probabilities [images, labels], id2label)."""
    session = ort.InferenceSession(os.path.join(package, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    labels = json.loads(session.get_modelmeta().custom_metadata_map["id2label"])
    with open(os.path.join(package, "preprocessor_config.json")) as f:
        processor = json.load(f)
    pixels = pixel_values(processor, paths)
    if session.get_inputs()[0].type == "tensor(float16)":  # an f16 build
        pixels = pixels.astype(np.float16)
    (logits,) = session.run(["logits"], {"pixel_values": pixels})
    logits = logits.astype(np.float32)
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True), {int(k): v for k, v in labels.items()}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    package, paths = argv[0], argv[1:]
    probabilities, labels = classify(package, paths)
    for path, row in zip(paths, probabilities):
        best = np.argsort(-row)[:3]
        print(f"{path}: " + ", ".join(f"{labels[int(i)]} ({row[i]:.4f})" for i in best))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
