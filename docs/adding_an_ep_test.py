"""docs/adding_an_ep.md is enough to add an EP: its two templates (capabilities file and
fusion table), dropped into a copy of the source tree with nothing else edited, are
discovered by the registry, get their Bazel library and suite from //tools:eps, and pass the
new EP's fusion, parity and golden tiers on one family (the template's kernels are the CPU
EP's, so every check the CPU EP passes holds)."""

from __future__ import annotations

import subprocess

import pytest

from docs import source_tree_copy as tree_copy

#: what the registry, the generators, deps_check and the suites read
_COPIED = ("BUILD.bazel", "WORKSPACE", "ep", "mobius", "rules", "testing", "third_party", "tools")
#: one decoder family keeps the tiers cheap (no other family name contains it: -k)
_FAMILY = "llama"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tree_copy.copy_tree(tmp_path_factory.mktemp("tree"), _COPIED, "golden", "golden_int4")
    (root / "mobius" / "ep" / "myep.py").write_text(
        tree_copy.template("adding_an_ep.md", "ep-template"))
    (root / "ep" / "myep").mkdir()
    (root / "ep" / "myep" / "myep_fusion_test.py").write_text(
        tree_copy.template("adding_an_ep.md", "fusion-template"))
    return root


def _run(tree, *args, **env_extra) -> subprocess.CompletedProcess:
    return tree_copy.run(tree, *args, unset=("MOBIUS_EP", "RUNFILES_DIR"), **env_extra)


def test_the_generator_gives_the_new_ep_its_library_and_suite(tree):
    run = _run(tree, "-m", "tools.eps")
    assert run.returncode == 1 and "stale" in run.stdout, run.stdout + run.stderr
    run = _run(tree, "-m", "tools.eps", "--update")
    assert run.returncode == 0, run.stdout + run.stderr
    text = (tree / "rules" / "eps.bzl").read_text()
    assert '"myep": [\n        ":contrib_ops",' in text
    assert '"myep": "f32",' in text
    assert "ep_suite()" in (tree / "ep" / "myep" / "BUILD.bazel").read_text()
    run = _run(tree, "-m", "tools.deps_check")
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_new_ep_passes_its_tiers(tree):
    """Goldens written as the doc says, then the three tiers of the new EP on one family."""
    for quant in ((), ("--quant", "int4")):
        run = _run(tree, "tools/golden.py", "--update", "--ep", "myep", "--family", _FAMILY,
                   *quant)
        assert run.returncode == 0, run.stdout + run.stderr
    for folder in ("golden", "golden_int4"):
        assert (tree / "ep" / "myep" / folder / f"{_FAMILY}.json").exists(), folder
    tiers = ("ep/myep/myep_fusion_test.py", "ep/parity_test.py", "ep/golden_test.py")
    run = _run(tree, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tiers, "-k",
               f"{_FAMILY} or covers", "-rA", MOBIUS_EP="myep")  # one process, as :suite runs them
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for tier in tiers:  # -rA lists each passed test with its file
        assert f"PASSED {tier}::" in run.stdout, (tier, run.stdout[-2000:])
    assert " failed" not in run.stdout, run.stdout[-2000:]
