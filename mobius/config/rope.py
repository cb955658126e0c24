"""Rotary position embedding variants, computed with numpy.

Each variant is a recipe for the inverse frequencies and for the factor that
scales cos/sin. The formulas follow the published RoPE-scaling papers (and the
conventions transformers uses, which our parity tests check against).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from mobius.config.fields import finite_float, positive_int
from mobius.errors import ConfigError

#: cos/sin tables up to this size are built (4M positions x 128 rotary dims)
_MAX_TABLE_BYTES = 4 << 30

SUPPORTED_ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope",
                        "proportional")


@dataclasses.dataclass(frozen=True)
class RopeConfig:
    """A normalized RoPE description (transformers 4.x and 5.x spellings map onto it)."""

    rope_type: str = "default"
    theta: float = 10000.0
    rotary_dim: int = 0  # number of leading head dims that rotate (partial rotary)
    max_position_embeddings: int = 2048
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None
    interleaved: bool = False
    #: proportional RoPE (Gemma 4's global layers): the fraction of the head's frequency
    #: pairs that rotate; the rest rotate by 0 (cos 1, sin 0) over the full head
    proportion: float = 1.0

    @property
    def is_dynamic(self) -> bool:
        """Whether the frequencies depend on the sequence length at run time."""
        return self.rope_type in ("dynamic", "longrope")

    @classmethod
    def from_hf(cls, raw: Mapping[str, Any], head_dim: int) -> "RopeConfig":
        """Reads RoPE settings from a config.json dict (4.x or 5.x spelling), checked."""
        params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        if not isinstance(params, Mapping):
            raise ConfigError(f"config.json: rope_parameters must be an object, got {params!r}")
        params = dict(params)
        rope_type = _rope_type(params)

        def number(key: str, default: Any, positive: bool = True) -> float | None:
            value = params.get(key, raw.get(key, default))
            return None if value is None else finite_float(key, value, positive=positive)

        max_pos = positive_int("max_position_embeddings", raw.get("max_position_embeddings", 2048))
        original = params.get(
            "original_max_position_embeddings", raw.get("original_max_position_embeddings")
        )
        if original is None and rope_type in ("llama3", "yarn", "longrope"):
            original = max_pos
        if original is not None:
            original = positive_int("original_max_position_embeddings", original)
        partial = number("partial_rotary_factor", 1.0)
        if partial > 1:
            raise ConfigError(f"config.json: 'partial_rotary_factor' must be in (0, 1], "
                              f"got {partial}")
        # proportional RoPE spans the head: its partial factor zeroes frequencies instead
        proportion, partial = (partial, 1.0) if rope_type == "proportional" else (1.0, partial)
        rotary_dim = int(head_dim * partial)
        if rotary_dim % 2:
            raise ConfigError(
                f"config.json: partial_rotary_factor={partial} gives an odd rotary dimension "
                f"{rotary_dim} for head_dim={head_dim}"
            )
        if rope_type in ("linear", "dynamic", "llama3") and "factor" not in params:
            raise ConfigError(f"config.json: rope type {rope_type!r} needs rope_parameters.factor")
        factor = params.get("factor")
        if factor is None:
            factor = max_pos / original if rope_type in ("yarn", "longrope") and original else 1.0
        rope = cls(
            rope_type=rope_type,
            theta=finite_float("rope_theta", params.get("rope_theta", raw.get("rope_theta", 1e4)),
                               positive=True),
            rotary_dim=rotary_dim,
            max_position_embeddings=max_pos,
            factor=finite_float("factor", factor, positive=True),
            original_max_position_embeddings=original,
            low_freq_factor=number("low_freq_factor", 1.0),
            high_freq_factor=number("high_freq_factor", 4.0),
            beta_fast=number("beta_fast", None) or 32.0,
            beta_slow=number("beta_slow", None) or 1.0,
            mscale=number("mscale", None, positive=False),
            mscale_all_dim=number("mscale_all_dim", None, positive=False),
            attention_factor=number("attention_factor", None),
            truncate=bool(params.get("truncate", True)),
            short_factor=_factors(params, "short_factor"),
            long_factor=_factors(params, "long_factor"),
            proportion=proportion,
        )
        if rope_type == "llama3" and rope.high_freq_factor <= rope.low_freq_factor:
            raise ConfigError("config.json: llama3 RoPE needs high_freq_factor > low_freq_factor")
        rope.check_table_size()
        return rope

    def check_table_size(self) -> None:
        """Refuses a cos/sin table larger than _MAX_TABLE_BYTES before anything is allocated.

        Static variants gather cos/sin from [max_position_embeddings, rotary_dim/2]
        tables: onnxruntime's GroupQueryAttention and RotaryEmbedding take them
        as inputs, so the package needs them (131072 x 64 x 2 x 4 bytes = 64 MiB
        for a 128k-context model); a config asking for more is refused.
        """
        if self.rope_type == "dynamic" or not self.rotary_dim:
            return
        tables = 4 if self.rope_type == "longrope" else 2
        size = self.max_position_embeddings * (self.rotary_dim // 2) * 4 * tables
        if size > _MAX_TABLE_BYTES:
            raise ConfigError(
                f"config.json: max_position_embeddings {self.max_position_embeddings} with a "
                f"rotary dimension of {self.rotary_dim} needs {size / 2**30:.1f} GiB of RoPE "
                f"tables; mobius accepts at most {_MAX_TABLE_BYTES >> 30} GiB"
            )

    # ------------------------------------------------------------------
    # Frequencies
    # ------------------------------------------------------------------

    def base_inv_freq(self, theta: float | None = None) -> np.ndarray:
        """Unscaled inverse frequencies, float64, length rotary_dim/2."""
        theta = self.theta if theta is None else theta
        exponents = np.arange(0, self.rotary_dim, 2, dtype=np.int64).astype(np.float64)
        return 1.0 / (theta ** (exponents / self.rotary_dim))

    def inv_freq(self) -> np.ndarray:
        """Inverse frequencies for sequences within the pretraining length."""
        kind = self.rope_type
        if kind in ("default", "dynamic"):
            return self.base_inv_freq()
        if kind == "linear":
            return self.base_inv_freq() / self.factor
        if kind == "llama3":
            return self._llama3_inv_freq()
        if kind == "yarn":
            return self._yarn_inv_freq()
        if kind == "longrope":
            return self.longrope_inv_freq(self.short_factor)
        if kind == "proportional":
            return self._proportional_inv_freq()
        raise AssertionError(kind)

    def longrope_inv_freq(self, factors) -> np.ndarray:
        """LongRoPE: per-dimension rescaled frequencies (short or long factor list)."""
        if factors is None or len(factors) != self.rotary_dim // 2:
            raise ConfigError(
                f"config.json: longrope short_factor/long_factor need {self.rotary_dim // 2} entries"
            )
        return self.base_inv_freq() / np.asarray(factors, dtype=np.float64)

    def attention_scaling(self) -> float:
        """The factor applied to cos and sin."""
        if self.rope_type == "yarn":
            if self.attention_factor is not None:
                return float(self.attention_factor)
            if self.mscale and self.mscale_all_dim:
                return _yarn_mscale(self.factor, self.mscale) / _yarn_mscale(
                    self.factor, self.mscale_all_dim
                )
            return _yarn_mscale(self.factor)
        if self.rope_type == "longrope":
            if self.attention_factor is not None:
                return float(self.attention_factor)
            original = self.original_max_position_embeddings
            if self.factor <= 1.0:
                return 1.0
            return math.sqrt(1 + math.log(self.factor) / math.log(original))
        return 1.0

    def cos_sin_cache(self, length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """cos/sin tables [length, rotary_dim/2] (float32) for the static variants."""
        length = length or self.max_position_embeddings
        positions = np.arange(length, dtype=np.float64)
        inv_freq = self.inv_freq().astype(np.float32).astype(np.float64)
        angles = np.outer(positions, inv_freq).astype(np.float32)
        scale = np.float32(self.attention_scaling())
        return np.cos(angles) * scale, np.sin(angles) * scale

    def _proportional_inv_freq(self) -> np.ndarray:
        """The first proportion of the pairs at the head's default frequencies, the rest 0."""
        rotating = int(self.proportion * self.rotary_dim // 2)
        inv_freq = np.zeros(self.rotary_dim // 2, dtype=np.float64)
        inv_freq[:rotating] = self.base_inv_freq()[:rotating]
        return inv_freq / self.factor

    def _llama3_inv_freq(self) -> np.ndarray:
        inv_freq = self.base_inv_freq()
        old_len = self.original_max_position_embeddings
        low_wavelen = old_len / self.low_freq_factor
        high_wavelen = old_len / self.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / self.factor, inv_freq)
        smooth = (old_len / wavelen - self.low_freq_factor) / (
            self.high_freq_factor - self.low_freq_factor
        )
        smoothed = (1 - smooth) * scaled / self.factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return np.where(medium, smoothed, scaled)

    def _yarn_inv_freq(self) -> np.ndarray:
        dim = self.rotary_dim
        base = self.theta
        original = self.original_max_position_embeddings

        def correction_dim(rotations: float) -> float:
            return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(self.beta_fast), correction_dim(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        extrapolation_weight = 1 - ramp
        pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
        extrapolated = 1.0 / pos_freqs
        interpolated = 1.0 / (self.factor * pos_freqs)
        return interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight


@dataclasses.dataclass(frozen=True)
class RopeKeys:
    """The top-level config.json RoPE keys RopeConfig.from_hf falls back to: an options
    base for families that build several RoPEs (one per layer type) beside ``rope``."""

    rope_parameters: dict | None = None  # transformers 5: may be nested by layer type
    rope_theta: float | None = None
    partial_rotary_factor: float | None = None
    original_max_position_embeddings: int | None = None
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    beta_fast: float | None = None
    beta_slow: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None

    def rope_raw(self, max_position_embeddings: int, **params: Any) -> dict[str, Any]:
        """A config.json-shaped dict of the keys that are set, for RopeConfig.from_hf,
        with ``params`` on top (the layer type's own rope_parameters / rope_theta)."""
        raw = {f.name: getattr(self, f.name) for f in dataclasses.fields(RopeKeys)
               if f.name != "rope_parameters" and getattr(self, f.name) is not None}
        return {**raw, "max_position_embeddings": max_position_embeddings, **params}


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def with_partial_rotary_default(raw: Mapping[str, Any], factor: float) -> dict[str, Any]:
    """``raw`` with ``partial_rotary_factor`` set to a family's own default
    (StableLM 0.25, GLM 0.5) when config.json spells it nowhere."""
    out = dict(raw)
    params = out.get("rope_parameters") or out.get("rope_scaling") or {}
    if "partial_rotary_factor" not in out and "partial_rotary_factor" not in params:
        out["partial_rotary_factor"] = factor
    return out


def _factors(params: Mapping[str, Any], key: str) -> tuple[float, ...] | None:
    """LongRoPE's per-dimension factor list: positive finite numbers."""
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise ConfigError(f"config.json: {key!r} must be a list of numbers, got {value!r}")
    return tuple(finite_float(key, v, positive=True) for v in value)


def _rope_type(params: Mapping[str, Any]) -> str:
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "su":  # Phi-3's original name for LongRoPE
        rope_type = "longrope"
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ConfigError(f"config.json: rope type {rope_type!r} is not supported; "
                          f"supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
    return rope_type
