"""Typed, bounded reading of config.json values: nothing is trusted from the checkpoint.

Every value becomes the type transformers gives it or a one-line ConfigError
naming the field: a boolean must be a JSON boolean (transformers 5 refuses
``"false"`` too), a size a positive integer below a bound no real model
reaches, a float finite. The bounds stop a hostile config from building a
billion layers or allocating a 373 GiB table before any check could run.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from mobius.errors import ConfigError

#: keys transformers declares as bool in the configs of the families mobius builds
BOOLEAN_KEYS = frozenset({
    "tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window", "qk_layernorm",
    "norm_topk_prob", "multimodal_projector_bias", "qkv_bias", "truncate", "use_cache",
    "scale_embedding", "use_qk_norm", "do_sample", "tie_encoder_decoder", "is_encoder_decoder",
})

#: keys that name something (an activation, a type): a JSON string where given
STRING_KEYS = frozenset({
    "model_type", "hidden_act", "hidden_activation", "activation_function",
    "projector_hidden_act", "vision_feature_select_strategy", "rope_type", "type",
})

#: normalization epsilons: a number > 0 (a negative one can take the square root of a
#: negative variance; zero divides by zero on a constant row)
EPSILON_KEYS = frozenset({"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps",
                          "norm_epsilon"})

#: float keys read as a number (the integer sizes go through positive_int, which says more)
NUMBER_KEYS = frozenset({
    "rope_theta", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "factor",
    "partial_rotary_factor", "attention_multiplier", "residual_multiplier",
    "embedding_multiplier", "logits_scaling", "query_pre_attn_scalar",
    "attn_logit_softcapping", "final_logit_softcapping", "rope_local_base_freq",
    "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "mscale",
    "mscale_all_dim", "attention_factor", "temperature", "top_p", "repetition_penalty",
    "type_vocab_size", *EPSILON_KEYS,
})

#: upper bounds of the size fields (the largest released models stay far below)
LIMITS = {
    "hidden_size": 1 << 17,
    "intermediate_size": 1 << 20,
    "num_hidden_layers": 1024,
    "num_attention_heads": 1024,
    "num_key_value_heads": 1024,
    "head_dim": 4096,
    "vocab_size": 1 << 23,
    "max_position_embeddings": 1 << 24,
    "original_max_position_embeddings": 1 << 24,
    "sliding_window": 1 << 24,
}
MAX_INT = 2**31 - 1


def check_values(raw: Any, file: str = "config.json") -> None:
    """Walks the whole JSON tree (iteratively): finite numbers, int32 integers, real booleans."""
    stack = [("", raw)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                where = f"{path}.{key}" if path else str(key)
                _check_type(file, key, where, item)
                stack.append((where, item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{file}: {path!r} is {value}; numbers must be finite")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ConfigError(f"{file}: {path!r} is {value}, out of range")


def _check_type(file: str, key: str, where: str, value: Any) -> None:
    if value is None:
        return
    if key in BOOLEAN_KEYS and not isinstance(value, bool):
        raise ConfigError(f"{file}: {where!r} must be true or false, got {value!r}")
    if key in STRING_KEYS and not isinstance(value, str):
        raise ConfigError(f"{file}: {where!r} must be a string, got {value!r}")
    if key in NUMBER_KEYS and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ConfigError(f"{file}: {where!r} must be a number, got {value!r}")
    if key in EPSILON_KEYS and value <= 0:
        raise ConfigError(f"{file}: {where!r} must be a positive finite number, got {value!r}")


def positive_int(key: str, value: Any, file: str = "config.json") -> int:
    """A JSON integer in [1, LIMITS[key]]."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{file}: {key!r} must be a positive integer, got {value!r}")
    limit = LIMITS.get(key, MAX_INT)
    if value > limit:
        raise ConfigError(f"{file}: {key!r} is {value}, more than mobius accepts ({limit})")
    return value


def boolean(raw: Mapping[str, Any], key: str, default: bool, file: str = "config.json") -> bool:
    value = raw.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{file}: {key!r} must be true or false, got {value!r}")
    return value


def finite_float(key: str, value: Any, *, positive: bool = False,
                 file: str = "config.json") -> float:
    """A JSON number (not a string, not a boolean), finite, and > 0 if ``positive``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{file}: {key!r} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or (positive and value <= 0):
        kind = "a positive finite number" if positive else "a finite number"
        raise ConfigError(f"{file}: {key!r} must be {kind}, got {value!r}")
    return value


def token_id(key: str, value: Any, vocab_size: int, file: str) -> int | None:
    """A token id: null or an integer. Whether it must lie inside the vocabulary
    depends on what uses it (ArchitectureConfig.check_token_ids)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{file}: {key!r} must be a token id in [0, {vocab_size}), "
                          f"got {value!r}")
    return value


def token_ids(key: str, value: Any, vocab_size: int, file: str) -> tuple[int, ...]:
    """One token id or a list of them (eos_token_id)."""
    if value is None:
        return ()
    values = value if isinstance(value, list) else [value]
    return tuple(token_id(key, v, vocab_size, file) for v in values)
