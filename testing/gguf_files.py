"""Tiny GGUF files written as llama.cpp's converter writes them, from tiny HF checkpoints.

llama.cpp's ``convert_hf_to_gguf.py`` (facts, not its code): metadata under
``{arch}.*`` and ``tokenizer.ggml.*``; tensors renamed (``blk.{i}.attn_q``);
Llama q/k rows permuted so each head's rotary halves interleave; Gemma's
RMSNorm scales stored plus one; a byte-level
BPE vocabulary padded to the embedding's rows with ``[PAD{i}]`` tokens of type
UNUSED; norms and biases kept F32, 2-D weights in the file's type (gguf's own
``quantize``). The result is read by mobius and, as the reference, by
transformers' GGUF loader.
"""

from __future__ import annotations

import json
import os

import gguf
import numpy as np
from safetensors.numpy import load_file

_ARCH = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3", "gemma": "gemma",
         "gemma2": "gemma2", "gemma3_text": "gemma3"}
_GEMMAS = ("gemma", "gemma2", "gemma3")
_BLOCK = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up",
}
#: Gemma 2 / 3 norms around attention and the MLP
_GEMMA2_BLOCK = {**_BLOCK, "post_attention_layernorm": "post_attention_norm",
                 "pre_feedforward_layernorm": "ffn_norm",
                 "post_feedforward_layernorm": "post_ffw_norm"}
_TOP = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
CHAT_TEMPLATE = "{% for m in messages %}<s>{{ m['content'] }}</s>{% endfor %}"
_CORPUS = ["The quick brown fox jumps over the lazy dog.",
           "ONNX Runtime runs models on many execution providers.",
           "Hello world, 0123456789; GGUF files hold llama.cpp's tensors!"]


def gguf_name(name: str, arch: str = "llama") -> str:
    module, kind = name.rsplit(".", 1)
    if module.startswith("model.layers."):
        _, _, layer, rest = module.split(".", 3)
        block = _GEMMA2_BLOCK if arch in ("gemma2", "gemma3") else _BLOCK
        return f"blk.{layer}.{block[rest]}.{kind}"
    return f"{_TOP[module]}.{kind}"


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order: each head's two rotary halves interleaved row by row."""
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def write_gguf(folder: str, path: str, qtype: str = "F32", types: dict | None = None,
               sentencepiece: str | None = None) -> str:
    """``folder``'s model as GGUF at ``path``: 2-D weights in ``qtype`` (``types``: GGUF
    tensor name -> another type, e.g. one unknown to mobius), the rest F32; the
    folder's byte-level BPE vocabulary, or the SentencePiece-style tokenizer.json
    ``sentencepiece`` (spm_tokenizer) as llama.cpp stores a SentencePiece model."""
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    arch = _ARCH[config["model_type"]]
    writer = gguf.GGUFWriter(path, arch)
    _hyper_parameters(writer, config)
    if sentencepiece is None:
        _tokenizer(writer, folder, config)
    else:
        _sentencepiece(writer, sentencepiece, config)
    for name, array in load_file(os.path.join(folder, "model.safetensors")).items():
        name_out = gguf_name(name, arch)
        if arch in _GEMMAS and name.endswith("norm.weight"):
            array = array + 1  # llama.cpp stores Gemma's 1 + w
        if arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            heads = config["num_attention_heads" if ".q_proj." in name
                           else "num_key_value_heads"]
            array = llama_cpp_permute(array, heads)
        kind = (types or {}).get(name_out, qtype if array.ndim == 2 else "F32")
        _add(writer, name_out, array.astype(np.float32), kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _add(writer, name: str, array: np.ndarray, kind: str) -> None:
    qtype = gguf.GGMLQuantizationType[kind]
    if kind == "F32":
        writer.add_tensor(name, array)
    elif kind == "F16":
        writer.add_tensor(name, array.astype(np.float16))
    elif kind in _RANDOM_BLOCKS or kind not in _QUANTIZABLE:
        writer.add_tensor(name, random_blocks(array.shape, kind), raw_dtype=qtype)
    else:
        writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)


_QUANTIZABLE = ("BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
#: types gguf cannot quantize in Python: byte offsets of each block's f16 scales
#: (Q6_K: d last; Q4_K / Q5_K: d and dmin first)
_RANDOM_BLOCKS = {"Q6_K": (208,), "Q4_K": (0, 2), "Q5_K": (0, 2)}


def random_blocks(shape: tuple[int, ...], kind: str, seed: int = 0) -> np.ndarray:
    """Random bytes of a ``kind`` tensor of ``shape``: every code and sub-scale random,
    each block's f16 scales set to small finite values (a k-quant file as llama.cpp's
    quantizer could write it). Any other type's bytes are noise (only to be refused)."""
    qtype = gguf.GGMLQuantizationType[kind]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (shape[0], shape[1] // block, size), dtype=np.uint8)
    for offset in _RANDOM_BLOCKS.get(kind, ()):
        scales = (2e-5 * (1 + rng.random(data.shape[:2]))).astype(np.float16)
        data[..., offset:offset + 2] = scales[..., None].view(np.uint8).reshape(
            *data.shape[:2], 2)
    return data.reshape(shape[0], -1)


def _hyper_parameters(writer, config: dict) -> None:
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config.get("rope_parameters") or {}
    writer.add_rope_freq_base(config.get("rope_theta") or rope.get("rope_theta")
                              or rope["full_attention"]["rope_theta"])
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_vocab_size(config["vocab_size"])
    if config.get("sliding_window"):
        writer.add_sliding_window(config["sliding_window"])
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if config.get(key) is not None:
            getattr(writer, f"add_{key}")(config[key])


def _tokenizer(writer, folder: str, config: dict) -> None:
    with open(os.path.join(folder, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    by_id = {i: t for t, i in tokenizer["model"]["vocab"].items()}
    special = {t["id"] for t in tokenizer["added_tokens"] if t["special"]}
    tokens, types = [], []
    for i in range(config["vocab_size"]):
        if i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    merges = [" ".join(m) if isinstance(m, list) else m for m in tokenizer["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    writer.add_pad_token_id(config["pad_token_id"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)


def spm_tokenizer(path: str) -> str:
    """Trains a tiny SentencePiece-style BPE (``▁`` for spaces, byte fallback, pieces
    numbered in merge order) and saves it as tokenizer.json at ``path``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    specials = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=specials, show_progress=False)
    tokenizer.train_from_iterator(_CORPUS * 20, trainer=trainer)
    tokenizer.save(path)
    return path


def _sentencepiece(writer, path: str, config: dict) -> None:
    """llama.cpp's SentencePiece vocabulary: tokens, scores (here minus the id, so a piece
    made by an earlier merge scores higher) and types, padded with UNUSED tokens."""
    with open(path) as f:
        by_id = {i: t for t, i in json.load(f)["model"]["vocab"].items()}
    tokens, scores, types = [], [], []
    for i in range(config["vocab_size"]):
        token = by_id.get(i, f"[PAD{i}]")
        tokens.append(token)
        scores.append(-float(i))
        types.append(gguf.TokenType.UNKNOWN if token == "<unk>" else
                     gguf.TokenType.CONTROL if token in ("<s>", "</s>") else
                     gguf.TokenType.BYTE if token.startswith("<0x") else
                     gguf.TokenType.UNUSED if i not in by_id else gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(True)
    writer.add_chat_template(CHAT_TEMPLATE)
