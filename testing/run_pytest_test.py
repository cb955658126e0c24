"""testing/run_pytest.py's garbage collection: none automatically while tests run, one
between tests once the process has grown by the garbage budget."""

from __future__ import annotations

import os
import subprocess
import sys

_RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_pytest.py")

GENERATED = '''
import gc
import sys

collected = []


class Cycle:
    """Cyclic garbage once dropped: only the cycle collector frees it."""

    def __init__(self, size):
        self.me = self
        self.payload = b"x" * size

    def __del__(self):
        collected.append(len(self.payload))


def test_1_no_automatic_collection_while_tests_run():
    assert not gc.isenabled() and gc.get_freeze_count() > 0
    Cycle(1 << 10)


def test_2_small_garbage_stays_then_big_garbage():
    assert collected == []
    sys.modules["__main__"].COLLECTOR.garbage.budget = 32 << 20
    Cycle(64 << 20)


def test_3_collected_once_over_the_budget():
    assert sorted(collected) == [1 << 10, 64 << 20]
'''


def test_garbage_is_collected_between_tests_past_the_budget(tmp_path):
    (tmp_path / "generated_test.py").write_text(GENERATED)
    env = {k: v for k, v in os.environ.items()
           if k not in ("XML_OUTPUT_FILE", "TEST_SHARD_STATUS_FILE", "TESTBRIDGE_TEST_ONLY")}
    env.update(TEST_TMPDIR=str(tmp_path), TEST_TOTAL_SHARDS="1", TEST_SHARD_INDEX="0")
    result = subprocess.run([sys.executable, _RUNNER, str(tmp_path / "generated_test.py")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "3 passed" in result.stdout
