"""Type checks of ``mobius.build``'s arguments, each error naming the argument.

Python callers pass what argparse would have refused on the command line
(``quant_block_size=32.0``, ``quant_override={'a': 'b'}``); without these checks
such a value travels into graph construction and fails there with a message
that names nothing the caller wrote. Ranges and choices are checked where the
value is used (resolve_quant, check_layout, ...), by the same names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import onnx_ir as ir

from mobius.ep.capabilities import EpCapabilities
from mobius.errors import MobiusError


class ArgumentTypeError(MobiusError, TypeError):
    """A ``mobius.build`` argument of the wrong type."""


_PATH = (str, os.PathLike)
_BOOLS = ("trace_optimization", "progress", "sliding_window_cache", "mtp")
_OPTIONAL_BOOLS = ("quant_symmetric", "quant_lm_head", "quant_embedding", "logits_to_keep")
_OPTIONAL_STRS = ("quant", "prefill_logits", "quant_method")
#: optional ints and their smallest value (their largest is checked where they are used)
_OPTIONAL_INTS = {"quant_block_size": 1, "quant_accuracy_level": 0, "context_length": 1,
                  "quant_calibration_passes": 1}
#: argument -> (accepted types, what the message calls them)
_TYPES = {
    "model": (_PATH, "a str or path"),
    "execution_provider": ((str, EpCapabilities), "a str or an EpCapabilities"),
    "dtype": ((str, ir.DataType), "a str or an onnx_ir DataType"),
    "layout": ((str,), "a str"),
    "adapter_mode": ((str,), "a str"),
}


def check_build_args(args: Mapping[str, Any]) -> None:
    """Raises ArgumentTypeError (or MobiusError for a bad int range) naming the first
    argument of ``args`` (name -> value) whose type ``mobius.build`` cannot take."""
    for name, value in args.items():
        if name in _TYPES:
            _need(name, value, *_TYPES[name])
        elif name in _BOOLS:
            _need(name, value, (bool,), "a bool")
        elif name in _OPTIONAL_BOOLS:
            _need(name, value, (bool, type(None)), "a bool or None")
        elif name in _OPTIONAL_STRS:
            _need(name, value, (str, type(None)), "a str or None")
        elif name in _OPTIONAL_INTS:
            _optional_int(name, value, _OPTIONAL_INTS[name])
        elif name == "quant_override":
            _quant_override(value)
        elif name == "quant_calibration" and value is not None:
            _need(name, value, _PATH, "a str or path or None")
        elif name == "adapter":
            _adapter(value)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _need(name: str, value: Any, types: tuple, what: str) -> None:
    bad_bool = isinstance(value, bool) and bool not in types
    if bad_bool or not isinstance(value, types):
        raise ArgumentTypeError(f"{name} must be {what}, got {_describe(value)}")


def _optional_int(name: str, value: Any, least: int) -> None:
    if value is None:
        return
    _need(name, value, (int,), "an int or None")
    if value < least:
        raise MobiusError(f"{name} must be at least {least}, got {value}")


def _quant_override(value: Any) -> None:
    """'PATTERN=KIND,...' or a sequence of (pattern, kind) pairs of strs."""
    if isinstance(value, str):
        return
    if not isinstance(value, (tuple, list)):
        raise ArgumentTypeError(f"quant_override must be a str 'PATTERN=KIND,...' or a sequence "
                                f"of (pattern, kind) pairs, got {_describe(value)}")
    for item in value:
        if not (isinstance(item, (tuple, list)) and len(item) == 2
                and all(isinstance(part, str) for part in item)):
            raise ArgumentTypeError(f"quant_override items must be (pattern, kind) pairs of "
                                    f"strs, got {_describe(item)}")


def _adapter(value: Any) -> None:
    if value is None or isinstance(value, _PATH):
        return
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, _PATH) for v in value):
        raise ArgumentTypeError(f"adapter must be a str, a path or a sequence of them, got "
                                f"{_describe(value)}")
