"""Strict parsing of the JSON a checkpoint hands us (config, index, safetensors headers).

Python's json module lets the last of two equal keys win and overflows the
stack on deep nesting; for untrusted input both are a one-line error instead.
"""

from __future__ import annotations

import json
from typing import Any

from mobius.errors import MobiusError


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


class _DuplicateKey(ValueError):
    pass


def parse_json(data: str | bytes, what: str, error: type[MobiusError] = MobiusError) -> Any:
    """``data`` parsed; ``what`` names the file (or header) in the one-line error."""
    try:
        return json.loads(data, object_pairs_hook=_no_duplicates)
    except _DuplicateKey as e:
        raise error(f"{what} is not valid: key {e.args[0]!r} appears twice") from None
    except RecursionError:
        raise error(f"{what} is not valid: its JSON is nested too deeply") from None
    except UnicodeDecodeError as e:
        raise error(f"{what} is not valid UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise error(f"{what} is not valid JSON: {e}") from None


#: no config, index or tokenizer config of a real checkpoint comes near this
MAX_JSON_BYTES = 256 * 1024 * 1024


def read_json_file(path: str, what: str, error: type[MobiusError] = MobiusError) -> Any:
    """The parsed file at ``path``; an unreadable or huge file is a one-line ``error`` too."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_JSON_BYTES + 1)
    except OSError as e:
        raise error(f"cannot read {what}: {e.strerror or e}") from None
    if len(data) > MAX_JSON_BYTES:
        raise error(f"{what} is larger than {MAX_JSON_BYTES >> 20} MiB; refusing to parse it")
    return parse_json(data, what, error)
