"""The Bazel-built tiny checkpoints (mobius' own and transformers'): complete, found, and
equal to what the generators make."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
import re

import pytest
from safetensors.numpy import load_file

from mobius import models
from mobius.models import registry
from mobius.models.registry import family_for
from mobius.tiny.checkpoint import make_tiny_checkpoint, prebuilt_tiny_checkpoint
from mobius.tiny.presets import TINY_PRESETS
from testing.hf_checkpoints import prebuilt_hf_checkpoint
from testing.reference_cases import case_dir
from testing.tiny import presets_cases

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bzl_preset_families() -> dict[str, str]:
    with open(os.path.join(_ROOT, "rules", "families.bzl")) as f:
        text = f.read()
    match = re.search(r"^TINY_PRESET_FAMILIES = (\{.*?\})$", text, re.S | re.M)
    assert match, "rules/families.bzl has no TINY_PRESET_FAMILIES dict"
    return ast.literal_eval(match.group(1))


def _declaring_module(family) -> str:
    """The mobius/models/<module>.py whose globals hold the family object."""
    def declares(value) -> bool:  # a module global, or one of the module's own FAMILIES tuple
        return value is family or (isinstance(value, tuple) and value is not registry.FAMILIES
                                   and any(v is family for v in value))

    for info in pkgutil.iter_modules(models.__path__):
        if not info.name.endswith("_test") and any(
                declares(v) for v in vars(importlib.import_module(f"mobius.models.{info.name}"))
                .values()):
            return info.name
    raise AssertionError(f"no module declares {family.name}")


def _expected_files(name: str) -> set[str]:
    """Config and weights; the tokenizer of a model with text (a CTC model's: its
    character vocabulary and feature-extractor config), the image processor of an
    image model."""
    raw = TINY_PRESETS[name]
    files = {"config.json", "model.safetensors"}
    if family_for(raw).task.write_tiny_processor is not None:
        return files | {"vocab.json", "tokenizer_config.json", "preprocessor_config.json"}
    if "vocab_size" in (raw.get("text_config") or raw):
        files.add("tokenizer.json")
    if family_for(raw).task.processor_files is not None:
        files.add("preprocessor_config.json")
    return files


def test_bzl_table_is_every_preset_and_its_family_module():
    table = _bzl_preset_families()
    assert sorted(table) == sorted(TINY_PRESETS), "run ./bazelw run //tools:families -- --update"
    for name, module in table.items():
        assert module == _declaring_module(family_for(TINY_PRESETS[name])), name


@pytest.mark.parametrize("name", sorted(TINY_PRESETS))
def test_each_preset_is_built_and_found(name):
    folder = prebuilt_tiny_checkpoint(name)
    data = os.path.join(os.environ["MOBIUS_TINY_DIR"], name, "model.safetensors")
    assert folder and os.path.isfile(data), f"{name} is not in the test's data"
    assert folder == os.path.dirname(os.path.realpath(data))  # the files, not runfiles links
    assert not any(os.path.islink(os.path.join(folder, f)) for f in os.listdir(folder))
    assert make_tiny_checkpoint(name) == folder  # read, not regenerated into a cache
    files = set(os.listdir(folder))
    assert _expected_files(name) <= files, files


def test_prebuilt_equals_a_fresh_generation(tmp_path):
    built = load_file(os.path.join(prebuilt_tiny_checkpoint("tiny-qwen3"), "model.safetensors"))
    fresh = load_file(os.path.join(make_tiny_checkpoint("tiny-qwen3", str(tmp_path / "q")),
                                   "model.safetensors"))
    assert built.keys() == fresh.keys()
    for key, value in fresh.items():
        assert (built[key] == value).all(), key


def test_other_seeds_are_not_taken_from_the_prebuilt_copy():
    assert prebuilt_tiny_checkpoint("tiny-llama", seed=1) is None


@pytest.mark.parametrize("name", sorted(TINY_PRESETS))
def test_each_transformers_checkpoint_is_built(name):
    folder = prebuilt_hf_checkpoint(name)
    data = os.path.join(os.environ["MOBIUS_TINY_DIR"], "hf", name, "config.json")
    assert folder and os.path.isfile(data), f"{name}: no hf/{name}"
    assert folder == os.path.dirname(os.path.realpath(data))
    assert _expected_files(name) <= set(os.listdir(folder))


def test_transformers_checkpoint_is_seed_zero_without_overrides():
    built = load_file(os.path.join(prebuilt_hf_checkpoint("tiny-qwen3"), "model.safetensors"))
    # make_hf_checkpoint's seed-0 checkpoint, written apart (presets_cases.py)
    fresh = load_file(os.path.join(case_dir(presets_cases, "tiny-qwen3"), "ckpt",
                                   "model.safetensors"))
    assert built.keys() == fresh.keys()
    for key, value in fresh.items():
        assert (built[key] == value).all(), key
