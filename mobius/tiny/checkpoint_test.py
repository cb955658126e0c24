"""The per-user cache of tiny checkpoints follows its preset: an edited preset is written
anew instead of reusing tensors shaped for the old one."""

from __future__ import annotations

import json
import os

from mobius.tiny import checkpoint
from mobius.tiny.presets import TINY_PRESETS


def _config(folder: str) -> dict:
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f)


def test_an_edited_preset_gets_a_new_cache_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("MOBIUS_CACHE", str(tmp_path))
    monkeypatch.delenv("MOBIUS_TINY_DIR", raising=False)
    first = checkpoint.make_tiny_checkpoint("tiny-llama")
    assert checkpoint.make_tiny_checkpoint("tiny-llama") == first  # reused while unchanged
    edited = {**TINY_PRESETS["tiny-llama"], "intermediate_size": 190}
    monkeypatch.setitem(TINY_PRESETS, "tiny-llama", edited)
    second = checkpoint.make_tiny_checkpoint("tiny-llama")
    assert second != first
    assert _config(second)["intermediate_size"] == 190
    assert _config(first)["intermediate_size"] != 190


def test_seeds_have_their_own_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("MOBIUS_CACHE", str(tmp_path))
    assert checkpoint.cache_entry("tiny-llama", 0) != checkpoint.cache_entry("tiny-llama", 1)


def test_a_module_that_reads_a_new_tensor_gets_a_new_cache_entry(tmp_path, monkeypatch):
    """A cached checkpoint from an older mobius whose module read fewer tensors is not
    reused (the build would fail on it): the entry follows the tensors the module reads."""
    from safetensors.numpy import load_file

    monkeypatch.setenv("MOBIUS_CACHE", str(tmp_path))
    monkeypatch.delenv("MOBIUS_TINY_DIR", raising=False)
    first = checkpoint.make_tiny_checkpoint("tiny-llama")
    draws = checkpoint._draws
    monkeypatch.setattr(checkpoint, "_draws",
                        lambda raw: [*draws(raw), ("model.new_gate.weight", (3, 4), False)])
    second = checkpoint.make_tiny_checkpoint("tiny-llama")
    assert second != first
    assert "model.new_gate.weight" in load_file(os.path.join(second, "model.safetensors"))
    assert "model.new_gate.weight" not in load_file(os.path.join(first, "model.safetensors"))
