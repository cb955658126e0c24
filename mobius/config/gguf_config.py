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
    "gemma": ("gemma", "GemmaForCausalLM"),
    "gemma2": ("gemma2", "Gemma2ForCausalLM"),
    "gemma3": ("gemma3_text", "Gemma3ForCausalLM"),
}
_GEMMAS = ("gemma", "gemma2", "gemma3")
#: llama.cpp scales Gemma queries by 1/sqrt(head_dim), except the 27B models (known by
#: their layer count), whose scale is 1/sqrt(hidden / heads): query_pre_attn_scalar
_QUERY_SCALE_BY_HIDDEN = {("gemma2", 46), ("gemma3", 62)}
#: llama.cpp's Gemma 3: the local layers' RoPE base, every 6th layer global
_GEMMA3_LOCAL_THETA, _GEMMA3_PATTERN = 10000.0, 6
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
_COUNTS = ("max_position_embeddings", "hidden_size", "intermediate_size", "num_hidden_layers",
           "num_attention_heads", "num_key_value_heads", "head_dim")
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
    act = "gelu_pytorch_tanh" if arch in _GEMMAS else "silu"
    raw: dict[str, Any] = {"architectures": [cls], "model_type": model_type, "hidden_act": act,
                           "vocab_size": int(tensors["token_embd.weight"].shape[-1]),
                           "tie_word_embeddings": "output.weight" not in tensors}
    for hf_key, key, required in _FIELDS:
        value = metadata(reader, f"{arch}.{key}")
        if value is None and required:
            raise ConfigError(f"GGUF file has no {arch}.{key} (the {hf_key})")
        if isinstance(value, list):
            raise ConfigError(f"GGUF {arch}.{key} varies per layer; mobius reads one value")
        if hf_key in _COUNTS and value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise ConfigError(f"GGUF {arch}.{key} must be a positive integer, got {value!r}")
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
    if arch in _GEMMAS:
        raw.update(_gemma(reader, arch, raw))
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


def _gemma(reader, arch: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Gemma's switches, from GGUF keys and the facts llama.cpp hard-codes: the query
    scale, softcapping (Gemma 2), sliding-window layers and Gemma 3's two RoPE bases."""
    head_dim = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    scale_by_hidden = (arch, raw["num_hidden_layers"]) in _QUERY_SCALE_BY_HIDDEN
    out: dict[str, Any] = {"hidden_activation": raw["hidden_act"], "head_dim": head_dim,
                           "query_pre_attn_scalar": raw["hidden_size"] // raw[
                               "num_attention_heads"] if scale_by_hidden else head_dim}
    if arch == "gemma":
        return out
    out["sliding_window"] = metadata(reader, f"{arch}.attention.sliding_window")
    if out["sliding_window"] is None:
        raise ConfigError(f"GGUF file has no {arch}.attention.sliding_window")
    layers = range(raw["num_hidden_layers"])
    if arch == "gemma2":
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            out[key] = metadata(reader, f"{arch}.{key}")
        out["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                              for i in layers]
        return out
    full = {"rope_type": "default", "rope_theta": raw.pop("rope_theta", 10000.0)}
    full.update(raw.pop("rope_scaling", None) or {})  # linear scaling: global layers only
    out["rope_parameters"] = {"full_attention": full, "sliding_attention": {
        "rope_type": "default", "rope_theta": _GEMMA3_LOCAL_THETA}}
    out["layer_types"] = ["full_attention" if (i + 1) % _GEMMA3_PATTERN == 0
                          else "sliding_attention" for i in layers]
    return out
