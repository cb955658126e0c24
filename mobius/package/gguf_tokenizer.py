"""A GGUF file's tokenizer -> tokenizer.json + tokenizer_config.json for the package.

llama.cpp stores a byte-level BPE tokenizer (``tokenizer.ggml.model`` "gpt2":
GPT-2, Llama 3, Qwen2, SmolLM …) as its token list, merges and token types,
naming its pre-tokenizer by ``tokenizer.ggml.pre``; a SentencePiece BPE one
("llama": Llama 2, Mistral 7B, Gemma) as tokens, scores and types (byte
tokens ``<0xNN>``), with no merges: a merge joins two pieces whose
concatenation is a piece, ranked by that piece's score, as SentencePiece
ranks them. Rebuilt here with the ``tokenizers`` library (no transformers),
as Hugging Face's fast tokenizers spell them. Any other model: the package
has no tokenizer, with a warning, as a checkpoint folder without one would.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers,
                        processors)

from mobius.config.gguf_config import metadata

logger = logging.getLogger(__name__)

_UNKNOWN, _CONTROL, _USER_DEFINED, _BYTE = 2, 3, 4, 6  # llama.cpp token types
#: GGUF pre-tokenizer names whose split is a Llama 3 / Qwen2 style regex
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = _QWEN2.replace(r"|\p{N}|", r"|\p{N}{1,3}|")
_SPLITS = {"qwen2": _QWEN2, "llama-bpe": _LLAMA3, "llama3": _LLAMA3}


def gguf_tokenizer_files(reader, context_length: int) -> dict[str, Any]:
    """{file name: JSON content} of the package's tokenizer ({} where not converted)."""
    kind = metadata(reader, "tokenizer.ggml.model")
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    if kind not in _MODELS or not tokens:
        logger.warning("GGUF tokenizer model %r is not converted (mobius converts %s); the "
                       "package will have no tokenizer", kind, " and ".join(_MODELS))
        return {}
    tokenizer = _MODELS[kind](reader, tokens)
    _special_tokens(tokenizer, reader, tokens)
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": context_length,
              "add_bos_token": bool(metadata(reader, "tokenizer.ggml.add_bos_token")),
              "add_eos_token": bool(metadata(reader, "tokenizer.ggml.add_eos_token"))}
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"),
                      ("pad", "padding_token_id"), ("unk", "unknown_token_id")):
        index = metadata(reader, f"tokenizer.ggml.{key}")
        if index is not None and 0 <= index < len(tokens):
            config[f"{role}_token"] = tokens[index]
    template = metadata(reader, "tokenizer.chat_template")
    if template:
        config["chat_template"] = template
    return {"tokenizer.json": json.loads(tokenizer.to_str()), "tokenizer_config.json": config}


def _vocab(tokens: list[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    return vocab


def _bpe(reader, tokens: list[str]) -> Tokenizer:
    merges = [tuple(m.split(" ", 1)) for m in metadata(reader, "tokenizer.ggml.merges") or ()]
    pre = metadata(reader, "tokenizer.ggml.pre") or "gpt2"
    tokenizer = Tokenizer(models.BPE(vocab=_vocab(tokens), merges=merges,
                                     ignore_merges=pre in _SPLITS and pre != "qwen2"))
    tokenizer.pre_tokenizer = _pre_tokenizer(pre)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def _sentencepiece(reader, tokens: list[str]) -> Tokenizer:
    """SentencePiece BPE: "▁" for spaces (one prepended to text not starting with one,
    unless add_space_prefix is false), merges ranked by score, unknown bytes as
    ``<0xNN>`` tokens."""
    types = metadata(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
    scores = metadata(reader, "tokenizer.ggml.scores") or [0.0] * len(tokens)
    unk = next((t for t, kind in zip(tokens, types) if kind == _UNKNOWN), None)
    tokenizer = Tokenizer(models.BPE(vocab=_vocab(tokens), merges=_merges(tokens, types, scores),
                                     unk_token=unk, fuse_unk=True, byte_fallback=True))
    prefix = metadata(reader, "tokenizer.ggml.add_space_prefix") is not False
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        "\u2581", prepend_scheme="first" if prefix else "never", split=False)
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    tokenizer.decoder = decoders.Sequence(steps + [decoders.Strip(" ", 1, 0)] if prefix
                                          else steps)
    return tokenizer


def _merges(tokens: list[str], types: list[int], scores: list[float]) -> list[tuple[str, str]]:
    """Every (left, right) whose concatenation is a normal piece, best-scored piece first."""
    ids = {t: i for i, t in enumerate(tokens) if types[i] in (1, _USER_DEFINED)}
    found = []
    for piece, index in ids.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in ids and right in ids:
                found.append((-scores[index], index, ids[left], ids[right], left, right))
    found.sort()
    return [(left, right) for *_, left, right in found]


def _special_tokens(tokenizer: Tokenizer, reader, tokens: list[str]) -> None:
    """Control and user-defined tokens as added tokens; the bos llama.cpp prepends."""
    types = metadata(reader, "tokenizer.ggml.token_type") or []
    tokenizer.add_tokens([AddedToken(tokens[i], special=kind == _CONTROL, normalized=False)
                          for i, kind in enumerate(types) if kind in (_CONTROL, _USER_DEFINED)])
    bos = metadata(reader, "tokenizer.ggml.bos_token_id")
    if metadata(reader, "tokenizer.ggml.add_bos_token") and bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A {tokens[bos]} $B",
            special_tokens=[(tokens[bos], int(bos))])


_MODELS = {"gpt2": _bpe, "llama": _sentencepiece}


def _pre_tokenizer(pre: str):
    """The split llama.cpp names ``pre``: a Llama 3 / Qwen2 regex, SmolLM's single digits
    before GPT-2's regex, or GPT-2's regex (any other name)."""
    if pre in _SPLITS:
        return pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_SPLITS[pre]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        byte_level])
    if pre != "gpt2":
        logger.warning("GGUF pre-tokenizer %r is read as GPT-2's split", pre)
    return byte_level
