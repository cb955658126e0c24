"""docs/adding_an_ep.md is enough to add an EP: its two templates (capabilities file and
fusion table), dropped into a copy of the source tree with nothing else edited, are
discovered by the registry, get their Bazel library and suite from //tools:eps, and pass the
new EP's fusion, parity and golden tiers on one family (the template's kernels are the CPU
EP's, so every check the CPU EP passes holds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))  # the source tree
#: what the registry, the generators, deps_check and the suites read
_COPIED = ("BUILD.bazel", "WORKSPACE", "ep", "mobius", "rules", "testing", "third_party", "tools")
#: one decoder family keeps the tiers cheap (no other family name contains it: -k)
_FAMILY = "llama"


def _template(marker: str) -> str:
    """The python block after the doc's <!-- marker -->."""
    with open(os.path.join(ROOT, "docs", "adding_an_ep.md")) as f:
        text = f.read()
    assert f"<!-- {marker} -->" in text, f"docs/adding_an_ep.md lost its {marker}"
    block = text.split(f"<!-- {marker} -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__", "bazel-*", "golden", "golden_int4")
    for name in _COPIED:
        source = os.path.join(ROOT, name)
        if os.path.isdir(source):
            shutil.copytree(source, root / name, ignore=ignore)
        else:
            shutil.copy(source, root / name)
    (root / "mobius" / "ep" / "myep.py").write_text(_template("ep-template"))
    (root / "ep" / "myep").mkdir()
    (root / "ep" / "myep" / "myep_fusion_test.py").write_text(_template("fusion-template"))
    return root


def _run(tree, *args, **env_extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("BUILD_WORKSPACE_DIRECTORY", "MOBIUS_EP", "RUNFILES_DIR")}
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    env["MOBIUS_CACHE"] = str(tree / "cache")  # into the copy
    env.update(env_extra)
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                          text=True)


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
