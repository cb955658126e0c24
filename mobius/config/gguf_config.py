"""GGUF metadata -> the config.json / generation_config.json it was converted from.

llama.cpp stores the hyper-parameters under ``{arch}.*`` keys and the special
token ids under ``tokenizer.ggml.*``; this gives the same dict transformers'
config.json would, so the existing families build a GGUF file unchanged.
What config.json would say but GGUF cannot (tied head, biases) is read from
which tensors the file holds.
"""

from __future__ import annotations

from typing import Any

from mobius.errors import ConfigError

#: GGUF architecture -> (HF model_type, HF architecture class)
ARCHITECTURES = {
    "llama": ("llama", "LlamaForCausalLM"),
    "qwen2": ("qwen2", "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", "Qwen3ForCausalLM"),
    "phi3": ("phi3", "Phi3ForCausalLM"),
}
#: (HF key, GGUF key under ``{arch}.``, required)
_FIELDS = (
    ("max_position_embeddings", "context_length", True),
    ("hidden_size", "embedding_length", True),
    ("intermediate_size", "feed_forward_length", True),
    ("num_hidden_layers", "block_count", True),
    ("num_attention_heads", "attention.head_count", True),
    ("num_key_value_heads", "attention.head_count_kv", False),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon", True),
    ("rope_theta", "rope.freq_base", False),
    ("head_dim", "attention.key_length", False),
)
_TOKENS = (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
           ("pad_token_id", "padding_token_id"))


def metadata(reader, key: str) -> Any:
    """The value of GGUF key ``key`` (a list for an array), or None when absent."""
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def gguf_config(reader) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(GGUF architecture, config.json, generation_config.json) of an opened GGUF file."""
    arch = metadata(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ConfigError(f"GGUF architecture {arch!r} is not supported; mobius reads "
                          f"{', '.join(ARCHITECTURES)} GGUF files")
    model_type, cls = ARCHITECTURES[arch]
    tensors = {t.name: t for t in reader.tensors}
    if "token_embd.weight" not in tensors:
        raise ConfigError("GGUF file has no token_embd.weight tensor")
    raw: dict[str, Any] = {"architectures": [cls], "model_type": model_type, "hidden_act": "silu",
                           "vocab_size": int(tensors["token_embd.weight"].shape[-1]),
                           "tie_word_embeddings": "output.weight" not in tensors}
    for hf_key, key, required in _FIELDS:
        value = metadata(reader, f"{arch}.{key}")
        if value is None and required:
            raise ConfigError(f"GGUF file has no {arch}.{key} (the {hf_key})")
        if isinstance(value, list):
            raise ConfigError(f"GGUF {arch}.{key} varies per layer; mobius reads one value")
        if value is not None:
            raw[hf_key] = value
    _check_rope(reader, arch, raw)
    if model_type == "llama":
        raw["attention_bias"] = "blk.0.attn_q.bias" in tensors
        raw["mlp_bias"] = "blk.0.ffn_up.bias" in tensors
    if model_type == "qwen2":
        raw["use_sliding_window"] = False
    window = metadata(reader, f"{arch}.attention.sliding_window")
    if model_type == "phi3" and window is not None:
        raw["sliding_window"] = int(window)
    generation = {}
    for hf_key, key in _TOKENS:
        value = metadata(reader, f"tokenizer.ggml.{key}")
        if value is not None:
            raw[hf_key] = generation[hf_key] = int(value)
    return arch, raw, generation


def _check_rope(reader, arch: str, raw: dict[str, Any]) -> None:
    """Full rotary, unscaled or linearly scaled: what these families' GGUF files hold."""
    head_dim = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    dims = metadata(reader, f"{arch}.rope.dimension_count")
    if dims is not None and dims != head_dim:
        raise ConfigError(f"GGUF {arch}.rope.dimension_count is {dims} but heads have "
                          f"{head_dim} dimensions; partial rotary is not read from GGUF")
    scaling = metadata(reader, f"{arch}.rope.scaling.type")
    if scaling in (None, "none"):
        return
    factor = metadata(reader, f"{arch}.rope.scaling.factor")
    if scaling != "linear" or factor is None:
        raise ConfigError(f"GGUF {arch}.rope.scaling.type {scaling!r} is not read; mobius "
                          f"reads linear RoPE scaling from GGUF")
    raw["rope_scaling"] = {"rope_type": "linear", "factor": float(factor)}
