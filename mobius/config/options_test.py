"""read_options: typed switches with transformers defaults, one-line errors on bad JSON types."""

from __future__ import annotations

import dataclasses

import pytest

from mobius.config.options import read_options, reject
from mobius.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class _Switches:
    flag: bool = False
    scale: float | None = None
    count: int = 3
    pattern: int | str = 4
    names: tuple[str, ...] = ()
    eps: float = dataclasses.field(default=1e-5, metadata={"key": "layer_norm_eps"})


def test_missing_and_null_keys_take_the_defaults():
    assert read_options(_Switches, {"flag": None}) == _Switches()


def test_values_are_read_and_converted():
    got = read_options(_Switches, {"flag": True, "scale": 2, "count": 7, "pattern": "LLG",
                                   "names": ["a", "b"], "layer_norm_eps": 1e-6})
    assert got == _Switches(True, 2.0, 7, "LLG", ("a", "b"), 1e-6)
    assert isinstance(got.scale, float)


@pytest.mark.parametrize("raw,message", [
    ({"flag": 1}, "'flag' must be bool"),
    ({"flag": "true"}, "'flag' must be bool"),
    ({"count": 1.5}, "'count' must be int"),
    ({"count": True}, "'count' must be int"),
    ({"scale": "big"}, "'scale' must be float"),
    ({"pattern": 1.5}, "'pattern' must be int or str"),
    ({"names": [1]}, "'names' must be str"),
    ({"layer_norm_eps": "x"}, "'layer_norm_eps' must be float"),
])
def test_wrong_json_types_are_one_line_config_errors(raw, message):
    with pytest.raises(ConfigError, match=message):
        read_options(_Switches, raw)


def test_reject_names_the_family_and_the_switch():
    reject(False, "falcon", "alibi")
    with pytest.raises(ConfigError, match="falcon: alibi is not supported"):
        reject(True, "falcon", "alibi")
