"""ArchitectureConfig: config.json + generation_config.json, normalized.

Accepts both transformers 4.x and 5.x spellings (``rope_theta`` vs
``rope_parameters``, ``torch_dtype`` vs ``dtype``, ``rope_scaling`` vs
``rope_parameters.rope_type``). Family-specific switches that are implied by
the ``model_type`` rather than spelled in config.json (e.g. Qwen2's QKV bias)
are supplied by the model family when it calls :meth:`ArchitectureConfig.from_dict`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Collection
from typing import Any, Mapping

from mobius.checkpoint_files import contained_file
from mobius.config.fields import (boolean, check_values, finite_float, positive_int, token_id,
                                  token_ids)
from mobius.config.rope import RopeConfig
from mobius.errors import ConfigError
from mobius.json_input import read_json_file

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class GenerationDefaults:
    """Search defaults from generation_config.json (and config.json fallbacks)."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    max_length: int | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any],
                  file: str = "generation_config.json") -> "GenerationDefaults":
        def number(key: str, default: float, positive: bool = True) -> float:
            value = raw.get(key)
            return default if value is None else finite_float(key, value, positive=positive,
                                                              file=file)

        top_k = raw.get("top_k")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int)
                                  or top_k < 0):
            raise ConfigError(f"{file}: 'top_k' must be a non-negative integer, got {top_k!r}")
        max_length = raw.get("max_length")
        return cls(
            do_sample=boolean(raw, "do_sample", False, file),
            temperature=number("temperature", 1.0) if raw.get("temperature") != 0 else 1.0,
            top_k=top_k or 50,
            top_p=number("top_p", 1.0) if raw.get("top_p") != 0 else 1.0,
            repetition_penalty=number("repetition_penalty", 1.0),
            max_length=None if max_length is None else positive_int("max_length", max_length,
                                                                    file),
        )


@dataclasses.dataclass(frozen=True)
class ArchitectureConfig:
    """Everything the model builders need to know about a decoder checkpoint."""

    model_type: str
    architectures: tuple[str, ...]
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rope: RopeConfig
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    bos_token_id: int | None = None
    eos_token_id: tuple[int, ...] = ()
    pad_token_id: int | None = None
    checkpoint_dtype: str | None = None
    generation: GenerationDefaults = GenerationDefaults()
    #: (key, file, id) of each special token id outside [0, vocab_size)
    ids_outside_vocab: tuple[tuple[str, str, int], ...] = dataclasses.field(
        default=(), compare=False, repr=False)
    raw: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    #: the family's typed switches (ModelFamily.options, read by config/options.read_options):
    #: what a model module reads from config.json beyond the fields above
    options: Any = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def from_dict(
        cls,
        raw: Mapping[str, Any],
        generation: Mapping[str, Any] | None = None,
        **family_overrides: Any,
    ) -> "ArchitectureConfig":
        """Normalizes a config.json dict; ``family_overrides`` win over the dict.

        A value of the wrong JSON type (``"layer_types": 5``, ``"rope_scaling":
        [1, 2]``, ...) is a one-line ConfigError, never a raw TypeError.
        """
        try:
            check_values(raw)
            check_values(generation or {}, "generation_config.json")
            values = cls._normalize(raw, generation)
            values.update(family_overrides)
            _check_overrides(values)
        except ConfigError:
            raise
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as e:
            raise ConfigError(f"config.json has a malformed value: {e}") from e
        return cls(**values)

    @classmethod
    def _normalize(cls, raw: Mapping[str, Any],
                   generation: Mapping[str, Any] | None) -> dict[str, Any]:
        raw = dict(raw)
        dims = _dimensions(raw)
        raw.setdefault("max_position_embeddings", dims["max_position_embeddings"])
        gen = dict(generation or {})
        layer_types = tuple(raw.get("layer_types") or ())
        if layer_types and len(layer_types) != dims["num_hidden_layers"]:
            raise ConfigError(f"config.json: layer_types has {len(layer_types)} entries for "
                              f"{dims['num_hidden_layers']} layers")
        sliding = raw.get("sliding_window") or None
        if raw.get("use_sliding_window") is False or sliding is None:
            sliding = None
        else:
            sliding = positive_int("sliding_window", sliding)
        bias = boolean(raw, "attention_bias", False)
        act = raw.get("hidden_act") if raw.get("hidden_act") is not None else raw.get(
            "hidden_activation")
        return dict(
            dims,
            model_type=str(_need(raw, "model_type")),
            architectures=tuple(raw.get("architectures") or ()),
            rope=RopeConfig.from_hf(raw, dims["head_dim"]),
            hidden_act="silu" if act is None else act,
            rms_norm_eps=finite_float(
                "rms_norm_eps", raw.get("rms_norm_eps", raw.get("layer_norm_eps", 1e-6)),
                positive=True),
            tie_word_embeddings=boolean(raw, "tie_word_embeddings", False),
            qkv_bias=bias,
            o_bias=bias,
            mlp_bias=boolean(raw, "mlp_bias", False),
            sliding_window=sliding,
            layer_types=layer_types,
            **_token_ids(raw, gen, dims["vocab_size"]),
            checkpoint_dtype=raw.get("dtype") or raw.get("torch_dtype"),
            generation=GenerationDefaults.from_dict(
                {**raw, **gen}, "generation_config.json" if gen else "config.json"),
            raw=raw,
        )

    def check_token_ids(self, used: Collection[str]) -> None:
        """Refuses a special token id outside the vocabulary that the package or its
        runtime uses (``used``: Task.token_ids, e.g. the eos / pad genai_config.json
        carries); warns about an unused one (transformers runs such a checkpoint)."""
        for key, file, value in self.ids_outside_vocab:
            if key in used:
                raise ConfigError(f"{file}: {key!r} must be a token id in "
                                  f"[0, {self.vocab_size}), got {value}")
            logger.warning("warning: %s: %r is %d, outside the vocabulary [0, %d); nothing "
                           "in this package uses it", file, key, value, self.vocab_size)

    def layer_sliding_window(self, layer: int) -> int | None:
        """The sliding window of one layer (None = full attention)."""
        if self.layer_types:
            kind = self.layer_types[layer]
            return self.sliding_window if kind == "sliding_attention" else None
        return self.sliding_window


def _need(raw: Mapping[str, Any], key: str) -> Any:
    if raw.get(key) is None:
        raise ConfigError(f"config.json: required field {key!r} is missing")
    return raw[key]


def _dimensions(raw: Mapping[str, Any]) -> dict[str, int]:
    """The size fields, each a bounded positive integer, consistent with each other."""
    hidden = positive_int("hidden_size", _need(raw, "hidden_size"))
    heads = positive_int("num_attention_heads", _need(raw, "num_attention_heads"))
    kv_heads = positive_int("num_key_value_heads", raw.get("num_key_value_heads") or heads)
    if heads % kv_heads:
        raise ConfigError(f"config.json: num_attention_heads ({heads}) must be a multiple of "
                          f"num_key_value_heads ({kv_heads})")
    head_dim = raw.get("head_dim") or None
    if head_dim is None:
        if hidden % heads:
            raise ConfigError(f"config.json: hidden_size ({hidden}) is not divisible by "
                              f"num_attention_heads ({heads}) and no head_dim is given")
        head_dim = hidden // heads
    return dict(
        vocab_size=positive_int("vocab_size", _need(raw, "vocab_size")),
        hidden_size=hidden,
        intermediate_size=positive_int("intermediate_size", _need(raw, "intermediate_size")),
        num_hidden_layers=positive_int("num_hidden_layers", _need(raw, "num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=positive_int("head_dim", head_dim),
        max_position_embeddings=positive_int("max_position_embeddings",
                                             raw.get("max_position_embeddings", 2048)),
    )


def _token_ids(raw: Mapping[str, Any], gen: Mapping[str, Any], vocab: int) -> dict[str, Any]:
    """bos/eos/pad, and which of them lie outside the vocabulary; generation_config.json
    wins."""
    def pick(key: str) -> tuple[Any, str]:
        if gen.get(key) is not None:
            return gen[key], "generation_config.json"
        return raw.get(key), "config.json"

    pad, pad_file = pick("pad_token_id")
    if pad is not None and (isinstance(pad, bool) or not isinstance(pad, int)):
        raise ConfigError(f"{pad_file}: 'pad_token_id' must be an integer, got {pad!r}")
    bos, bos_file = pick("bos_token_id")
    eos, eos_file = pick("eos_token_id")
    ids = dict(bos_token_id=token_id("bos_token_id", bos, vocab, bos_file),
               eos_token_id=token_ids("eos_token_id", eos, vocab, eos_file),
               pad_token_id=pad)
    files = {"bos_token_id": bos_file, "eos_token_id": eos_file, "pad_token_id": pad_file}
    outside = [(key, files[key], v) for key, value in ids.items()
               for v in (value if isinstance(value, tuple) else (value,))
               if v is not None and not 0 <= v < vocab]
    return dict(ids, ids_outside_vocab=tuple(outside))


def _check_overrides(values: dict[str, Any]) -> None:
    """Family overrides may pass config.json values through: their types are checked too."""
    for key in ("tie_word_embeddings", "qkv_bias", "o_bias", "mlp_bias", "qk_norm"):
        if key in values and not isinstance(values[key], bool):
            raise ConfigError(f"config.json: {key!r} must be true or false, got {values[key]!r}")
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers"):
        if key in values:
            positive_int(key, values[key])
    values["rms_norm_eps"] = finite_float("rms_norm_eps", values["rms_norm_eps"], positive=True)


def read_json(path: str) -> dict[str, Any]:
    """Reads a JSON object file, turning every problem into a one-line ConfigError."""
    data = read_json_file(path, os.path.basename(path), ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{os.path.basename(path)} must hold a JSON object")
    return data


def load_config(folder: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Returns (config.json, generation_config.json or {}) of a checkpoint folder."""
    config_path = contained_file(folder, "config.json", "the checkpoint", ConfigError)
    if not os.path.isfile(config_path):
        raise ConfigError(f"{folder}: no config.json found (is this a Hugging Face checkpoint?)")
    generation_path = contained_file(folder, "generation_config.json", "the checkpoint",
                                     ConfigError)
    generation = read_json(generation_path) if os.path.isfile(generation_path) else {}
    return read_json(config_path), generation
