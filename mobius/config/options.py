"""Typed family switches read from config.json.

A family declares the switches it reads as a frozen dataclass whose fields
carry the transformers defaults; :func:`read_options` fills it from the raw
config.json dict. A value of the wrong JSON type is a one-line ConfigError
(never a silent ``False``), and a field's config.json key can differ from its
name (``field(default=..., metadata={"key": "layer_norm_eps"})``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Mapping, TypeVar

from mobius.errors import ConfigError

T = TypeVar("T")


def read_options(cls: type[T], raw: Mapping[str, Any]) -> T:
    """``cls`` (a dataclass of typed, defaulted switches) from config.json.

    A missing key or a JSON null takes the field's default.
    """
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        if not field.init:  # a constant of the family, not read from config.json
            continue
        key = field.metadata.get("key", field.name)
        value = raw.get(key)
        if value is None:
            continue
        values[field.name] = _checked(key, value, hints[field.name])
    return cls(**values)


def _checked(key: str, value: Any, hint: Any) -> Any:
    """``value`` converted to the field's type, or a ConfigError."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    allowed = [t for t in typing.get_args(hint) if t is not type(None)] if union else [hint]
    for kind in allowed:
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, str):
            return value
        if kind is dict and isinstance(value, dict):  # a sub-config, read by its own options
            return value
        if typing.get_origin(kind) is tuple and isinstance(value, (list, tuple)):
            item = typing.get_args(kind)[0]
            return tuple(_checked(key, v, item) for v in value)
    names = " or ".join(getattr(k, "__name__", str(k)) for k in allowed)
    raise ConfigError(f"config.json: {key!r} must be {names}, got {value!r}")


def reject(condition: bool, family: str, what: str) -> None:
    """A one-line ConfigError for a switch value the family does not build."""
    if condition:
        raise ConfigError(f"config.json: {family}: {what} is not supported")
