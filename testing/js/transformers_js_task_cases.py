"""transformers' side of transformers_js_tasks_test, run at build time (reference_cases,
//rules:references.bzl), so the test process imports neither torch nor transformers.

One case per transformers.js pipeline task on a single-file encoder: ckpt/ (the tiny
preset, every parameter random), image.png (random pixels at the processor's size,
so neither client resizes) for an image task, and expected.json: what Python
transformers' ``pipeline(task)`` returns for ``CASES_SPEC[case]``'s arguments
(image-feature-extraction: expected.npy, its last hidden state).
"""

from __future__ import annotations

import json
import os

TEXT = "The quick brown fox jumps over the lazy dog"
#: fill-mask's text; the tiny tokenizer gets the mask token added (an id < vocab_size)
MASKED = "The quick brown [MASK] jumps over the lazy dog"
LABELS = ["cat", "dog", "fox", "bird"]
IMAGE = "image.png"
#: the image's side: the tiny image presets' image_size (mobius/tiny/bases.py VISION)
IMAGE_SIZE = 32

#: case -> (tiny preset, pipeline task, its text input or None (the image), options);
#: the options are the same keywords in Python and transformers.js
CASES_SPEC = {
    "bert-seq-cls": ("tiny-bert-seq-cls", "text-classification", TEXT, {"top_k": 3}),
    "bert-tok-cls": ("tiny-bert-tok-cls", "token-classification", TEXT, {"ignore_labels": []}),
    "bert-mlm": ("tiny-bert-mlm", "fill-mask", MASKED, {"top_k": 5}),
    "vit-img-cls": ("tiny-vit-img-cls", "image-classification", None, {"top_k": 7}),
    "vit": ("tiny-vit", "image-feature-extraction", None, {}),
    # the clients' default templates differ (Python's ends in a period): one for both,
    # ending in the text tower's eos token (tiny-clip: id 3), whose state CLIP pools
    "clip": ("tiny-clip", "zero-shot-image-classification", None,
             {"hypothesis_template": "a photo of a {}<unk>"}),
}
CASES = sorted(CASES_SPEC)


def arguments(case: str, folder: str) -> list:
    """The pipeline's positional arguments (the same in both clients)."""
    _, task, text, _ = CASES_SPEC[case]
    if text is not None:
        return [text]
    image = os.path.join(folder, IMAGE)
    return [image, LABELS] if task == "zero-shot-image-classification" else [image]


def write_case(case: str, folder: str) -> None:
    """ckpt/, image.png and transformers' pipeline output (see above) into ``folder``."""
    import numpy as np
    import transformers

    from testing.hf_checkpoints import make_hf_checkpoint

    preset, task, text, options = CASES_SPEC[case]
    # BERT at initializer_range 0.2: scores far from uniform (the default 0.02 gives
    # fill-mask top-5 within 5e-5 of each other)
    overrides = {"initializer_range": 0.2} if preset.startswith("tiny-bert") else {}
    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, **overrides)
    if task == "fill-mask":
        tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
        tokenizer.add_special_tokens({"mask_token": "[MASK]"})
        tokenizer.save_pretrained(checkpoint)
    if text is None:
        _write_image(os.path.join(folder, IMAGE))
    run = transformers.pipeline(task, model=checkpoint)
    args = arguments(case, folder)
    if task == "zero-shot-image-classification":
        output = run(args[0], candidate_labels=args[1], **options)
    else:
        output = run(*args, **options)
    if task == "image-feature-extraction":
        np.save(os.path.join(folder, "expected.npy"), np.asarray(output, np.float32))
        return
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(_plain(output), f, indent=1)


def _write_image(path: str) -> None:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    Image.fromarray(pixels).save(path)


def _plain(value):
    """JSON of a pipeline's output (numpy scalars as Python numbers)."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value.item() if hasattr(value, "item") else value
