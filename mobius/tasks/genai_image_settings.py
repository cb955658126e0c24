"""The checkpoint's preprocessor_config.json settings a VLM family writes into
onnxruntime-genai's image processor config.

The vision-language task reads the file (image_processor.read_extras, kept in
config.raw) and hands the parsed JSON to the module's
``genai_processor_files(preprocessor)``; a family takes each value genai's
processor has an attribute for from there (the family default where the
checkpoint has no file or no such key), and refuses, with one line, a setting
genai's processor would not honour, so that the package never processes images
other than the checkpoint's transformers processor does.
"""

from __future__ import annotations

from typing import Any, Mapping

from mobius.errors import ConfigError
from mobius.tasks.image_processor import FILE


def number(preprocessor: Mapping[str, Any], key: str, default: float,
           *, integer: bool = False) -> float:
    """``preprocessor[key]`` (a positive number), else ``default``."""
    value = preprocessor.get(key, default)
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        raise ConfigError(f"{FILE}: {key} must be a positive {'integer' if integer else 'number'}"
                          f", got {value!r}")
    return value


def triple(preprocessor: Mapping[str, Any], key: str, default) -> list[float]:
    """``preprocessor[key]``: per-channel values (image_mean / image_std), else ``default``."""
    value = preprocessor.get(key, default)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    if (not isinstance(value, (list, tuple)) or len(value) != 3
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise ConfigError(f"{FILE}: {key} must be 3 numbers (RGB), got {value!r}")
    return [float(v) for v in value]


def size_entry(preprocessor: Mapping[str, Any], key: str) -> Any:
    """``preprocessor["size"][key]`` where size is a mapping holding it, else None."""
    size = preprocessor.get("size")
    return size.get(key) if isinstance(size, dict) else None


def require(preprocessor: Mapping[str, Any], fixed: Mapping[str, Any], why: str) -> None:
    """Refuses a key whose value differs from the one genai's processor always uses."""
    for key, value in fixed.items():
        if key in preprocessor and preprocessor[key] is not None and preprocessor[key] != value:
            raise ConfigError(f"{FILE}: {key}={preprocessor[key]!r} is not supported "
                              f"(onnxruntime-genai's {why} uses {value!r})")
