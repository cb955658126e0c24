"""transformers' side of the docs/examples tests (the reference_cases rule runs it at build
time, //rules:references.bzl): per example and checkpoint, the checkpoint the example's
package is built from and what transformers' pipeline, generate or sentence-transformers
answers on the example's inputs (expected.json / .npz), so that examples_test imports
neither torch nor transformers.
"""

from __future__ import annotations

import json
import os

import numpy as np

from mobius.tiny.presets import TINY_PRESETS

MASK = "<mask>"
FILL_MASK_TEXTS = [f"The quick brown {MASK} jumps over the lazy dog.", f"ONNX {MASK} runs models."]
TEXTS = ["The quick brown fox jumps over the lazy dog.", "ONNX Runtime runs models.",
         "Once upon a time"]  # different lengths: the batch is padded
T2T_TEXTS = ["translate English to German: The quick brown fox jumps over the lazy dog.",
             "summarize: ONNX Runtime runs models.", "Once upon a time"]  # padded batch
T2T_NEW_TOKENS = 12
LLAVA_NEW_TOKENS = 8
RATE = 16000
#: zero-shot label prompts of different lengths (CLIP's batch is padded); the tiny CLIP has
#: 24 positions and a small tokenizer, so the prompts are short. SigLIP's are padded to 64
#: (the pipeline's length, the example's default): its tiny text tower gets 64 positions.
#: The tiny CLIP's eos_token_id is outside its vocabulary, so transformers pools its text
#: tower at position 0: the label comes first, or every prompt would score the same.
LABELS = ["cat", "red car", "dog", "tree"]
TEMPLATE = "{} photo"
SIGLIP_TEXT = {"text_config": {**TINY_PRESETS["tiny-siglip"]["text_config"],
                               "max_position_embeddings": 64}}
#: text2text case -> (family preset, untie the t5 head, overrides): untied heads where a
#: tied one would echo the start token (mT5, BART)
TEXT2TEXT = {"t5": ("tiny-t5", False, {}), "mt5": ("tiny-mt5", True, {}),
             "bart": ("tiny-bart", False, {"tie_word_embeddings": False}),
             "marian": ("tiny-marian", False, {"tie_word_embeddings": False})}
#: text-classification case -> (preset, overrides, pipeline task)
CLASSIFICATION = {
    "distilbert-seq-cls": ("tiny-distilbert-seq-cls", {}, "text-classification"),
    "bert-seq-cls": ("tiny-bert-seq-cls", {}, "text-classification"),
    "reranker": ("tiny-bert-seq-cls", {"id2label": {"0": "LABEL_0"},
                                       "label2id": {"LABEL_0": 0}}, "text-classification"),
    "roberta-tok-cls": ("tiny-roberta-tok-cls", {}, "token-classification"),
}
#: "<example>__<variant>": ckpt/ (or st/) and expected.json / expected.npz
CASES = [
    *(f"fill_mask__{p}" for p in ("tiny-bert-mlm", "tiny-roberta-mlm")),
    *(f"image_classification__{p}" for p in ("tiny-vit-img-cls", "tiny-dinov2-img-cls")),
    "llava_generate__tiny-llava",
    *(f"sentence_embeddings__{p}" for p in ("tiny-bert", "tiny-mpnet")),
    *(f"speech_recognition__{p}" for p in ("tiny-wav2vec2", "tiny-hubert")),
    *(f"text2text__{name}" for name in TEXT2TEXT),
    *(f"text_classification__{name}" for name in CLASSIFICATION),
    *(f"zero_shot_image_classification__{p}" for p in ("tiny-clip", "tiny-siglip")),
]


def write_case(case: str, folder: str) -> None:
    example, _, variant = case.partition("__")
    expected = _WRITERS[example](variant, folder)
    if isinstance(expected, dict) and all(isinstance(v, np.ndarray) for v in expected.values()):
        np.savez(os.path.join(folder, "expected.npz"), **expected)
    else:
        with open(os.path.join(folder, "expected.json"), "w") as f:
            json.dump(expected, f, default=lambda o: o.item())  # numpy scalars


def images(folder: str, seed: int, sizes) -> list[str]:
    """Made-up PNGs of the given (height, width): ramps with noise (resize and crop matter)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    paths = []
    for i, (height, width) in enumerate(sizes):
        if seed == 0:  # a horizontal ramp (image classification)
            ramp = np.linspace(0, 255, width)[None, :, None] * np.ones((height, 1, 3))
            pixels = np.clip(ramp + rng.integers(0, 80, size=(height, width, 3)), 0, 255)
        else:  # a vertical one (zero-shot)
            ramp = np.linspace(0, 255, height)[:, None, None] * np.ones((1, width, 3))
            pixels = np.clip(ramp + rng.integers(0, 90, (height, width, 3)), 0, 255)
        path = os.path.join(folder, f"image{i}.png")
        Image.fromarray(pixels.astype(np.uint8)).save(path)
        paths.append(path)
    return paths


def recorded_images(folder: str) -> tuple[str, list[str], list]:
    """(checkpoint, image paths, transformers' pipeline answers per image) as an image
    example's write_case left them in its case ``folder``."""
    with open(os.path.join(folder, "expected.json")) as f:
        expected = json.load(f)
    paths = [os.path.join(folder, f"image{i}.png") for i in range(len(expected))]
    return os.path.join(folder, "ckpt"), paths, expected


CLASSIFIER_IMAGES = (0, [(45, 60), (70, 38)])
ZERO_SHOT_IMAGES = (1, [(50, 64), (72, 40)])


def waveforms(seed: int = 0) -> list[np.ndarray]:
    """Tones with noise, of different lengths (0.1 - 0.2 s), in [-1, 1)."""
    rng = np.random.default_rng(seed)
    out = []
    for samples, pitch in ((1600, 220.0), (2400, 440.0), (3200, 330.0)):
        t = np.arange(samples) / RATE
        wave_ = 0.4 * np.sin(2 * np.pi * pitch * t) + 0.1 * rng.standard_normal(samples)
        out.append(np.round(wave_ * 32767) / 32768)  # exactly what a 16-bit WAV holds
    return [w.astype(np.float32) for w in out]


def llava_prompt(facts: dict, images_: int):
    """(pixels or None, prompt token ids with one image token per image) of the llava case
    with ``images_`` images; ``facts``: the config values _llava_generate records."""
    rng = np.random.default_rng(images_)
    size = facts["image_size"]
    pixels = rng.standard_normal((images_, facts["num_channels"], size, size)).astype(
        np.float32) if images_ else None
    image_token = facts["image_token_index"]
    prompt = [int(t) for t in rng.integers(4, image_token, size=3)]
    for _ in range(images_):  # one <image> per image, then text
        prompt += [image_token] + [int(t) for t in rng.integers(4, 900, size=2)]
    return pixels, prompt


def _checkpoint(folder: str, preset: str, **overrides) -> str:
    from testing.hf_checkpoints import make_hf_checkpoint

    return make_hf_checkpoint(os.path.join(folder, "ckpt"), preset, **overrides)


def _pipeline(task: str, model: str):
    import transformers

    return transformers.pipeline(task, model=model, device="cpu")


def _fill_mask(preset: str, folder: str):
    """The tiny tokenizer with a mask token added, as a masked LM's has; top-5 answers."""
    from tokenizers import Tokenizer

    ckpt = _checkpoint(folder, preset)
    path = os.path.join(ckpt, "tokenizer.json")
    tokenizer = Tokenizer.from_file(path)
    tokenizer.add_special_tokens([MASK])
    tokenizer.save(path)
    config_path = os.path.join(ckpt, "tokenizer_config.json")
    with open(config_path) as f:
        config = json.load(f)
    with open(config_path, "w") as f:
        json.dump({**config, "mask_token": MASK}, f)
    pipe = _pipeline("fill-mask", ckpt)
    return [[{"token": e["token"], "score": e["score"]} for e in pipe(text, top_k=5)]
            for text in FILL_MASK_TEXTS]


def _image_classification(preset: str, folder: str):
    ckpt = _checkpoint(folder, preset)
    paths = images(folder, *CLASSIFIER_IMAGES)
    labels = len(TINY_PRESETS[preset]["id2label"])
    return _pipeline("image-classification", ckpt)(paths, top_k=labels)


def _llava_generate(preset: str, folder: str):
    """The config facts llava_prompt reads, and per image count (0, 1, 2) the prompt with
    each image token expanded to the tower's patch count and transformers' greedy tokens."""
    from testing.hf_checkpoints import load_hf_model
    from testing.llava_checkpoints import hf_llava_generate, make_llava_checkpoint

    model = load_hf_model(make_llava_checkpoint(os.path.join(folder, "ckpt")))
    config, vision = model.config, model.config.vision_config
    facts = {"image_token_index": config.image_token_index, "num_channels": vision.num_channels,
             "image_size": vision.image_size, "patch_size": vision.patch_size}
    per_image = (vision.image_size // vision.patch_size) ** 2
    runs = {"facts": facts}
    for count in (0, 1, 2):
        pixels, prompt = llava_prompt(facts, count)
        ids = [t for token in prompt
               for t in [token] * (per_image if token == config.image_token_index else 1)]
        runs[str(count)] = {"input_ids": ids, "tokens": hf_llava_generate(
            model, np.array([ids], np.int64), pixels, LLAVA_NEW_TOKENS)}
    return runs


def _sentence_embeddings(preset: str, folder: str) -> dict[str, np.ndarray]:
    """st/ (mean pooling, Normalize); encode(TEXTS) and the feature-extraction pipeline's
    unpadded hidden states per sentence."""
    import tempfile

    from sentence_transformers import SentenceTransformer

    from testing.encoder_runs import save_sentence_transformer
    from testing.hf_checkpoints import make_hf_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        base = make_hf_checkpoint(os.path.join(tmp, "ckpt"), preset)
        st = save_sentence_transformer(base, os.path.join(folder, "st"), ("mean",), True)
    pipe = _pipeline("feature-extraction", st)
    out = {"embedding": SentenceTransformer(st, device="cpu").encode(TEXTS)}
    out.update({f"hidden_{i}": np.array(pipe(s))[0] for i, s in enumerate(TEXTS)})
    return out


def _speech_recognition(preset: str, folder: str):
    pipe = _pipeline("automatic-speech-recognition", _checkpoint(folder, preset))
    return [pipe(w.copy())["text"] for w in waveforms()]


def _text2text(name: str, folder: str):
    """transformers' greedy generate on the padded batch, and whether it is padded."""
    import torch
    import transformers

    from testing.hf_checkpoints import untie_t5_head

    preset, untie, overrides = TEXT2TEXT[name]
    ckpt = _checkpoint(folder, preset, **overrides)
    if untie:  # a tied, unscaled mT5 head repeats the start token: untie it, as mT5 is
        untie_t5_head(ckpt)
    tokenizer = transformers.AutoTokenizer.from_pretrained(ckpt)
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    batch = tokenizer(T2T_TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        tokens = model.generate(**batch, do_sample=False, num_beams=1,
                                max_new_tokens=T2T_NEW_TOKENS).numpy()
    return {"tokens": tokens.tolist(), "padded": not bool(batch["attention_mask"].all())}


def _text_classification(name: str, folder: str):
    preset, overrides, task = CLASSIFICATION[name]
    ckpt = _checkpoint(folder, preset, **overrides)
    if task == "token-classification":
        import transformers

        pipe = transformers.pipeline(task, model=ckpt, device="cpu", ignore_labels=[])
        return [[{k: t[k] for k in ("index", "entity", "score")} for t in row]
                for row in pipe(TEXTS)]
    return _pipeline(task, ckpt)(TEXTS)


def _zero_shot_image_classification(preset: str, folder: str):
    """As SigLIP's own tokenizer: no attention_mask (the model reads none)."""
    ckpt = _checkpoint(folder, preset, **(SIGLIP_TEXT if preset == "tiny-siglip" else {}))
    if preset == "tiny-siglip":
        path = os.path.join(ckpt, "tokenizer_config.json")
        with open(path) as f:
            config = json.load(f)
        with open(path, "w") as f:
            json.dump({**config, "model_input_names": ["input_ids"]}, f)
    pipe = _pipeline("zero-shot-image-classification", ckpt)
    return [pipe(path, candidate_labels=LABELS, hypothesis_template=TEMPLATE)
            for path in images(folder, *ZERO_SHOT_IMAGES)]


_WRITERS = {
    "fill_mask": _fill_mask, "image_classification": _image_classification,
    "llava_generate": _llava_generate, "sentence_embeddings": _sentence_embeddings,
    "speech_recognition": _speech_recognition, "text2text": _text2text,
    "text_classification": _text_classification,
    "zero_shot_image_classification": _zero_shot_image_classification,
}
