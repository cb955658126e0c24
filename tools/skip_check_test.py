"""No test turns green by skipping because a package is missing (see tools/skip_check.py)."""

from __future__ import annotations

import os

from tools.skip_check import silent_skips

#: the source tree; under Bazel, the runfiles: the files //:source_tree declares, no others
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_silent_skips():
    problems = silent_skips(ROOT)
    assert problems == [], "import the reference dependency instead:\n" + "\n".join(problems)


def test_check_finds_each_kind_of_skip(tmp_path):
    """The check can fail: each form of skip in a test file is reported, with its line."""
    (tmp_path / "mobius").mkdir()
    (tmp_path / "mobius" / "a_test.py").write_text(
        "import pytest\n"
        'torch = pytest.importorskip("torch")\n'
        "@pytest.mark.skipif(True, reason='x')\n"
        "def test_x():\n"
        "    pytest.skip('no')\n")
    (tmp_path / "mobius" / "fine_test.py").write_text("import torch\n")
    assert silent_skips(str(tmp_path)) == [
        "mobius/a_test.py:2: pytest.importorskip",
        "mobius/a_test.py:3: pytest.mark.skipif",
        "mobius/a_test.py:5: pytest.skip",
    ]
