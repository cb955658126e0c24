"""A GGUF file's tokenizer -> tokenizer.json + tokenizer_config.json for the package.

llama.cpp stores a byte-level BPE tokenizer (``tokenizer.ggml.model`` "gpt2":
GPT-2, Llama 3, Qwen2, SmolLM …) as its token list, merges and token types,
and names its pre-tokenizer by ``tokenizer.ggml.pre``. Rebuilt here with the
``tokenizers`` library (no transformers), so onnxruntime-genai and
transformers load the package's tokenizer as the original folder's. A
SentencePiece vocabulary ("llama") is not converted yet: the package then has
no tokenizer, with a warning, as a checkpoint folder without one would.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from mobius.config.gguf_config import metadata

logger = logging.getLogger(__name__)

_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types that are added tokens
#: GGUF pre-tokenizer names whose split is a Llama 3 / Qwen2 style regex
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = _QWEN2.replace(r"|\p{N}|", r"|\p{N}{1,3}|")
_SPLITS = {"qwen2": _QWEN2, "llama-bpe": _LLAMA3, "llama3": _LLAMA3}


def gguf_tokenizer_files(reader, context_length: int) -> dict[str, Any]:
    """{file name: JSON content} of the package's tokenizer ({} where not converted)."""
    kind = metadata(reader, "tokenizer.ggml.model")
    tokens = metadata(reader, "tokenizer.ggml.tokens")
    if kind != "gpt2" or not tokens:
        logger.warning("GGUF tokenizer model %r is not converted (mobius converts byte-level "
                       "BPE, 'gpt2'); the package will have no tokenizer", kind)
        return {}
    tokenizer = _bpe(reader, tokens)
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


def _bpe(reader, tokens: list[str]) -> Tokenizer:
    merges = [tuple(m.split(" ", 1)) for m in metadata(reader, "tokenizer.ggml.merges") or ()]
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    pre = metadata(reader, "tokenizer.ggml.pre") or "gpt2"
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=pre in _SPLITS
                                     and pre != "qwen2"))
    tokenizer.pre_tokenizer = _pre_tokenizer(pre)
    tokenizer.decoder = decoders.ByteLevel()
    types = metadata(reader, "tokenizer.ggml.token_type") or []
    tokenizer.add_tokens([AddedToken(tokens[i], special=kind == _CONTROL, normalized=False)
                          for i, kind in enumerate(types) if kind in (_CONTROL, _USER_DEFINED)])
    bos = metadata(reader, "tokenizer.ggml.bos_token_id")
    if metadata(reader, "tokenizer.ggml.add_bos_token") and bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{tokens[bos]} $A", pair=f"{tokens[bos]} $A {tokens[bos]} $B",
            special_tokens=[(tokens[bos], int(bos))])
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


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
