"""Trains a tiny byte-level BPE tokenizer offline and writes HF tokenizer files."""

from __future__ import annotations

import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>"]  # ids 0..3: pad, bos, eos, unk

_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "ONNX Runtime runs models on many execution providers.",
    "mobius builds ONNX packages from Hugging Face checkpoints.",
    "Attention is all you need; rotary embeddings encode positions.",
    "Once upon a time there was a tiny language model that generated tokens.",
    "0123456789 + - * / = ( ) [ ] { } < > , . ; : ! ? ' \"",
]


def write_tiny_tokenizer(folder: str, vocab_size: int) -> None:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=min(vocab_size, 600),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_CORPUS * 20, trainer=trainer)
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "unk_token": "<unk>",
                "model_max_length": 256,
                "add_bos_token": False,
            },
            f,
            indent=2,
        )
