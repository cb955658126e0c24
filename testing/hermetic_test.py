"""A test target must not touch $HOME: run a representative one with HOME an empty read-only dir.

The representative builds tiny packages by name (the tiny checkpoints come from
Bazel-built data, caches go under TEST_TMPDIR) and runs them in onnxruntime.
A control test that writes under ~ proves the check can fail.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_RUNNER = os.path.join(_ROOT, "testing", "run_pytest.py")
REPRESENTATIVE = ["mobius/tasks/concrete_dims_test.py",
                  "-k", "without_the_flag or (tiny-llama and f16)"]
_CACHE_VARS = ("MOBIUS_CACHE", "MOBIUS_TINY_DIR", "XDG_CACHE_HOME", "HF_HOME", "TORCH_HOME")


def run_with_empty_home(args: list[str], root) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Runs the test runner on ``args`` as Bazel would, with HOME an empty read-only dir;
    returns the result and what the run left in HOME."""
    home, tmp = root / "home", root / "test_tmpdir"
    home.mkdir()
    tmp.mkdir()
    home.chmod(stat.S_IRUSR | stat.S_IXUSR)  # root ignores this: the listing below still catches it
    env = {k: v for k, v in os.environ.items() if k not in _CACHE_VARS}
    env.update(HOME=str(home), TEST_TMPDIR=str(tmp), PYTHONDONTWRITEBYTECODE="1")
    env.pop("XML_OUTPUT_FILE", None)
    env.pop("TEST_SHARD_STATUS_FILE", None)
    try:
        result = subprocess.run([sys.executable, _RUNNER, *args], cwd=_ROOT, env=env,
                                capture_output=True, text=True, timeout=240)
    finally:
        home.chmod(stat.S_IRWXU)
    left = sorted(os.path.relpath(os.path.join(d, f), home)
                  for d, dirs, files in os.walk(home) for f in files + dirs)
    return result, left


def test_representative_target_leaves_home_untouched(tmp_path):
    result, left = run_with_empty_home(REPRESENTATIVE, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "deselected" in result.stdout, result.stdout[-500:]
    assert left == [], f"the test wrote under $HOME: {left}"


def test_check_catches_a_test_that_writes_under_home(tmp_path):
    bad = tmp_path / "writes_home_test.py"
    bad.write_text("import os\n\ndef test_cache():\n"
                   "    os.makedirs(os.path.expanduser('~/.cache/x'), exist_ok=True)\n")
    (tmp_path / "run").mkdir()
    result, left = run_with_empty_home([str(bad)], tmp_path / "run")
    assert left == [".cache", ".cache/x"] or result.returncode != 0, (left, result.stdout)
