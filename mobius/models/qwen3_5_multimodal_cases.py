"""transformers' side of qwen3_5_multimodal_test (the reference_cases rule runs it at build
time, //rules:references.bzl): Qwen 3.5 dense and MoE checkpoints as released, written by
transformers' Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration (decoder
in text_config, a vision tower beside it, every parameter random), with their greedy tokens
on text prompts (the prompts of the genai cohort: dense_families_genai_cases.py).
"""

from __future__ import annotations

import os

from mobius.models.dense_families_genai_cases import NEW_TOKENS, PROMPTS
from mobius.tiny.bases import VOCAB_SIZE
from mobius.tiny.presets import TINY_PRESETS

#: case: (text preset, model_type, architecture)
VARIANTS = {
    "dense": ("tiny-qwen3_5", "qwen3_5", "Qwen3_5ForConditionalGeneration"),
    "moe": ("tiny-qwen3_5_moe", "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration"),
}
CASES = sorted(VARIANTS)
#: Qwen3-VL's tiny tower without deepstack (Qwen 3.5's has none), merged into the decoder's 64
VISION = {key: value for key, value in TINY_PRESETS["tiny-qwen3_vl"]["vision_config"].items()
          if key != "deepstack_visual_indexes"}


def multimodal_config(case: str) -> dict:
    """config.json of the case: the text preset under text_config, the tower beside it."""
    preset, model_type, architecture = VARIANTS[case]
    text = {key: value for key, value in TINY_PRESETS[preset].items() if key != "architectures"}
    return {"model_type": model_type, "architectures": [architecture],
            "text_config": text, "vision_config": {**VISION, "model_type": f"{model_type}_vision",
                                                   "out_hidden_size": text["hidden_size"]},
            "image_token_id": VOCAB_SIZE - 1, "video_token_id": VOCAB_SIZE - 2,
            "vision_start_token_id": VOCAB_SIZE - 3, "vision_end_token_id": VOCAB_SIZE - 4,
            "tie_word_embeddings": False}


def write_case(case: str, folder: str) -> None:
    """ckpt/ and transformers.json (greedy tokens and top-1 / top-2 gaps per prompt)."""
    import torch
    import transformers

    from mobius.tiny.tokenizer import write_tiny_tokenizer
    from testing import genai_harness

    raw = multimodal_config(case)
    config = transformers.AutoConfig.for_model(**raw)
    torch.manual_seed(0)
    model = getattr(transformers, raw["architectures"][0])(config).eval()
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():  # every parameter random: the (1 + w) norms, A_log and biases too
        for param in model.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=generator))
    ckpt = os.path.join(folder, "ckpt")
    model.save_pretrained(ckpt, safe_serialization=True)
    write_tiny_tokenizer(ckpt, VOCAB_SIZE)
    text = raw["text_config"]
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"), model, PROMPTS,
                                     NEW_TOKENS, eos_token_id=text["eos_token_id"],
                                     pad_token_id=text["pad_token_id"])
