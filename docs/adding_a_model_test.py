"""docs/adding_a_model.md is enough to add a family: its template file, dropped into a copy
of the source tree with nothing else edited, is discovered by the registry, gets its Bazel
library from the generator, builds from its tiny preset, and matches transformers'
LlamaForCausalLM in f32 (the template is a Llama under a new model_type)."""

from __future__ import annotations

import subprocess

import pytest

from docs import adding_a_model_cases as cases
from docs import source_tree_copy as tree_copy
from testing.reference_cases import case_dir

#: what the registry, the generator and deps_check read (ep/ and docs/ hold no library)
_COPIED = ("BUILD.bazel", "WORKSPACE", "mobius", "rules", "testing", "third_party", "tools")

_DRIVER = '''
import json, os, sys

import mobius
from mobius.models.registry import family_for
from mobius.tiny.presets import TINY_PRESETS
from testing import decoder_reference
from testing.model_runs import build_package, f32_parity

case, out = sys.argv[1], sys.argv[2]
raw = TINY_PRESETS["tiny-llama_clone"]
assert family_for(raw).name == "llama_clone", family_for(raw).name
mobius.build("tiny-llama_clone", execution_provider="cpu").save(os.path.join(out, "tiny"))

# the reference (adding_a_model_cases.py): transformers' Llama on the template preset's config
with open(os.path.join(case, "config.json")) as f:
    llama = json.load(f)
assert {k: v for k, v in raw.items() if k not in ("model_type", "architectures")} == llama, raw
reference = decoder_reference.load(os.path.join(case, "reference.npz"))
built = build_package(os.path.join(case, "ckpt"), os.path.join(out, "hf"))
print("max_abs_diff", f32_parity(built, reference).max_abs_diff)
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tree_copy.copy_tree(tmp_path_factory.mktemp("tree"), _COPIED)
    (root / "mobius" / "models" / "llama_clone.py").write_text(
        tree_copy.template("adding_a_model.md", "family-template"))
    return root


def _run(tree, *args) -> subprocess.CompletedProcess:
    return tree_copy.run(tree, *args, unset=("MOBIUS_TINY_DIR",))  # the new preset is generated


def test_the_generator_gives_the_new_family_its_bazel_library(tree):
    run = _run(tree, "-m", "tools.families")
    assert run.returncode == 1 and "stale" in run.stdout, run.stdout + run.stderr
    run = _run(tree, "-m", "tools.families", "--update")
    assert run.returncode == 0, run.stdout + run.stderr
    text = (tree / "rules" / "families.bzl").read_text()
    assert '"llama_clone": [\n        ":llama",' in text
    assert '"tiny-llama_clone": "llama_clone",' in text
    run = _run(tree, "-m", "tools.deps_check")
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_new_family_builds_and_matches_transformers(tree, tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    run = _run(tree, str(driver), case_dir(cases, "llama_clone"), str(tmp_path / "out"))
    assert run.returncode == 0, run.stdout + run.stderr
    diff = float(run.stdout.split("max_abs_diff")[-1])
    assert diff < 1e-4, diff
