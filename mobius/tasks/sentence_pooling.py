"""sentence-transformers' pipeline of a checkpoint (``modules.json``, ``1_Pooling/config.json``),
read into a typed :class:`SentencePooling` that the feature-extraction task turns into a
``sentence_embedding`` output.

Supported pipelines: Transformer -> Pooling (cls / max / mean / mean_sqrt_len_tokens /
lasttoken, any combination) -> optional Normalize. Anything else (Dense projections,
weighted-mean pooling, ...) is refused with a one-line error rather than silently
dropped. The Pooling config comes in two spellings: ``pooling_mode`` (a name or a
list, in output order) and the older ``pooling_mode_*_tokens`` booleans (output in
sentence-transformers' fixed order; none set means mean).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

from mobius.errors import ConfigError, UnsupportedModelError

#: the key under which the pooling joins config.raw (see Task.read_extras)
RAW_KEY = "mobius_sentence_pooling"
#: the older boolean spelling, in sentence-transformers' output order
_MODE_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
              "pooling_mode_mean_tokens": "mean",
              "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
              "pooling_mode_weightedmean_tokens": "weightedmean",
              "pooling_mode_lasttoken": "lasttoken"}
SUPPORTED_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "lasttoken")


@dataclasses.dataclass(frozen=True)
class SentencePooling:
    modes: tuple[str, ...]
    normalize: bool


def read_extras(folder: str) -> dict[str, Any]:
    """{RAW_KEY: {...}} when the checkpoint is a sentence-transformers model, else {}."""
    pooling = read_sentence_pooling(folder)
    if pooling is None:
        return {}
    return {RAW_KEY: {"modes": list(pooling.modes), "normalize": pooling.normalize}}


def sentence_pooling(raw: Mapping[str, Any]) -> SentencePooling | None:
    """The pooling a config carries (added by :func:`read_extras`), or None."""
    value = raw.get(RAW_KEY)
    if value is None:
        return None
    return SentencePooling(tuple(value["modes"]), bool(value["normalize"]))


def read_sentence_pooling(folder: str) -> SentencePooling | None:
    path = os.path.join(folder, "modules.json")
    if not os.path.isfile(path):
        return None
    modules = _read_json(path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ConfigError(f"{path}: expected a list of modules")
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    if kinds[:1] != ["Transformer"] or kinds[1:2] != ["Pooling"] or not set(kinds[2:]) <= {
            "Normalize"} or len(kinds) > 3:
        raise UnsupportedModelError(
            f"{path}: sentence-transformers pipeline {kinds} is not supported; mobius builds "
            f"Transformer -> Pooling [-> Normalize]")
    config = _read_json(os.path.join(_inside(folder, modules[1].get("path", "")), "config.json"))
    if not isinstance(config, dict):
        raise ConfigError(f"{folder}: the Pooling config is not a JSON object")
    modes = _modes(config)
    unsupported = [m for m in modes if m not in SUPPORTED_MODES]
    if unsupported or not modes:
        raise UnsupportedModelError(f"{folder}: sentence pooling {list(modes)} is not supported "
                                    f"(supported: {', '.join(SUPPORTED_MODES)})")
    if config.get("include_prompt") is False:
        raise UnsupportedModelError(f"{folder}: pooling with include_prompt=false is not supported")
    return SentencePooling(modes, normalize=len(kinds) == 3)


def _modes(config: Mapping[str, Any]) -> tuple[str, ...]:
    mode = config.get("pooling_mode")
    if mode is not None:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
        if not all(isinstance(m, str) for m in modes):
            raise ConfigError(f"pooling_mode {mode!r} is not a name or a list of names")
        return modes
    return tuple(m for key, m in _MODE_KEYS.items() if config.get(key)) or ("mean",)


def _inside(folder: str, relative: str) -> str:
    """``folder/relative``, refusing any path that leaves the checkpoint folder."""
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(root, str(relative)))
    if os.path.commonpath([root, path]) != root or path == root:
        raise ConfigError(f"{folder}: modules.json names path {relative!r} outside the checkpoint")
    return path


def _read_json(path: str):
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: not found (named by modules.json)")
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: not valid JSON ({e.msg})") from None
