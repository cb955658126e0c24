"""Every first-party module a test imports loads from the .pyc compiled at build time
(rules/bytecode.bzl), not from source: tests cannot write bytecode, so without it each
test process compiles mobius again."""

from __future__ import annotations

import importlib.util
import os
import sys

import mobius.builder  # noqa: F401 -- the modules a typical test imports
import testing.model_runs  # noqa: F401

CHECKED_HASH = 0b11  # PEP 552 flags: hash-based, checked against the source


def _first_party_modules():
    return sorted((name, module) for name, module in sys.modules.items()
                  if name.split(".")[0] in ("mobius", "testing")
                  and getattr(module, "__file__", None) and not name.endswith("_test"))


def test_tests_do_not_write_bytecode():
    assert sys.flags.dont_write_bytecode


def test_every_first_party_module_has_its_build_time_bytecode():
    modules = _first_party_modules()
    assert len(modules) > 100, [name for name, _ in modules]
    missing = [name for name, module in modules if not os.path.isfile(module.__cached__)]
    assert not missing, f"no build-time .pyc for {missing}"


def test_the_bytecode_matches_its_source():
    for name, module in _first_party_modules():
        with open(module.__cached__, "rb") as f:
            header = f.read(16)
        with open(module.__file__, "rb") as f:
            source = f.read()
        assert header[:4] == importlib.util.MAGIC_NUMBER, name
        assert int.from_bytes(header[4:8], "little") == CHECKED_HASH, name
        assert header[8:16] == importlib.util.source_hash(source), name
