"""Greedy generation from a mobius LLaVA package with plain onnxruntime.

    mobius build --model llava-hf/llava-1.5-7b-hf out/llava --ep cpu
    python docs/examples/llava_generate.py out/llava "USER: <image>\\nWhat is shown? ASSISTANT:" \\
        --pixels pixels.npy --max-new-tokens 32

onnxruntime-genai 0.18 has no "llava" model type, so this package runs through
onnxruntime directly. It holds three models that genai_config.json names:

* vision.onnx: pixel_values [images, 3, H, W] -> image_features [image tokens, hidden]
  (CLIP tower + projector);
* embedding.onnx: input_ids + image_features -> inputs_embeds (each image
  token's row is replaced by the next image feature, in order);
* model.onnx: the decoder on inputs_embeds with a KV cache
  (past_key_values.N.key/value in, present.N.key/value out).

The prompt's ``<image>`` stands for one image; it is expanded to as many image
tokens as the vision model gives features per image. ``--pixels`` is a .npy of
preprocessed pixel_values (the model's image processor: resize, center crop,
rescale, normalize), one image per ``<image>``. Needs onnxruntime, tokenizers, numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import onnxruntime as ort


class LlavaPackage:
    """The package's three onnxruntime sessions and the names genai_config.json gives."""

    def __init__(self, package: str):
        with open(os.path.join(package, "genai_config.json")) as f:
            self.config = json.load(f)["model"]

        def session(section):
            path = os.path.join(package, self.config[section]["filename"])
            return ort.InferenceSession(path, providers=["CPUExecutionProvider"])

        self.vision, self.embedding = session("vision"), session("embedding")
        self.decoder = session("decoder")
        self.image_token_id = int(self.config["image_token_id"])

    def image_features(self, pixel_values: np.ndarray | None) -> np.ndarray:
        hidden = self.embedding.get_inputs()[1].shape[-1]
        if pixel_values is None:
            return np.zeros((0, hidden), np.float32)
        (features,) = self.vision.run(None, {"pixel_values": pixel_values.astype(np.float32)})
        return features

    def tokens_per_image(self, pixel_values: np.ndarray) -> int:
        return len(self.image_features(pixel_values[:1]))

    def embed(self, input_ids: np.ndarray, features: np.ndarray) -> np.ndarray:
        (embeds,) = self.embedding.run(None, {"input_ids": input_ids, "image_features": features})
        return embeds


def _empty_cache(decoder: ort.InferenceSession) -> dict[str, np.ndarray]:
    cache = {}
    for i in decoder.get_inputs():
        if i.name.startswith("past_key_values."):
            _, heads, _, head_size = i.shape
            cache[i.name] = np.zeros((1, heads, 0, head_size), np.float32)
    return cache


def generate(package: str | LlavaPackage, input_ids: np.ndarray,
             pixel_values: np.ndarray | None = None, max_new_tokens: int = 32,
             eos_token_id: int | None = None) -> list[int]:
    """Greedy new tokens for one prompt (input_ids [1, n], image tokens already expanded)."""
    llava = package if isinstance(package, LlavaPackage) else LlavaPackage(package)
    decoder = llava.decoder
    cache = _empty_cache(decoder)
    ids = input_ids.astype(np.int64)
    embeds = llava.embed(ids, llava.image_features(pixel_values))
    total, new_tokens = ids.shape[1], []
    while len(new_tokens) < max_new_tokens:
        step = embeds.shape[1]
        feeds = {"inputs_embeds": embeds,
                 "attention_mask": np.ones((1, total), np.int64),
                 "position_ids": np.arange(total - step, total, dtype=np.int64)[None], **cache}
        outputs = dict(zip([o.name for o in decoder.get_outputs()], decoder.run(None, feeds)))
        token = int(outputs["logits"][0, -1].argmax())
        new_tokens.append(token)
        if token == eos_token_id:
            break
        cache = {name.replace("present.", "past_key_values.", 1): value
                 for name, value in outputs.items() if name.startswith("present.")}
        embeds = llava.embed(np.array([[token]], np.int64), llava.image_features(None))
        total += 1
    return new_tokens


def expand_image_tokens(ids: list[int], image_token_id: int, per_image: int) -> list[int]:
    """Each image token of the tokenized prompt becomes ``per_image`` of them."""
    out = []
    for token in ids:
        out += [token] * (per_image if token == image_token_id else 1)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package")
    parser.add_argument("prompt", help="text with one <image> per image")
    parser.add_argument("--pixels", help=".npy of preprocessed pixel_values [images, 3, H, W]")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    from tokenizers import Tokenizer

    llava = LlavaPackage(args.package)
    tokenizer = Tokenizer.from_file(os.path.join(args.package, "tokenizer.json"))
    pixels = np.load(args.pixels) if args.pixels else None
    ids = tokenizer.encode(args.prompt).ids
    if pixels is not None:
        ids = expand_image_tokens(ids, llava.image_token_id, llava.tokens_per_image(pixels))
    new = generate(llava, np.array([ids], np.int64), pixels, args.max_new_tokens,
                   eos_token_id=llava.config.get("eos_token_id"))
    print(tokenizer.decode(new))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
