"""testing/run_pytest.py's garbage collection (none automatically while tests run, one
between tests once the process has grown by the garbage budget) and a bundle's sharding
by test file."""

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


def _run(tmp_path, files: list[str], shards: int = 1, index: int = 0, **env_vars) -> str:
    """The runner's stdout on ``files`` of ``tmp_path``, as Bazel's shard ``index``."""
    env = {k: v for k, v in os.environ.items() if k not in (
        "XML_OUTPUT_FILE", "TEST_SHARD_STATUS_FILE", "TESTBRIDGE_TEST_ONLY", "MOBIUS_SHARD_BY")}
    env.update(env_vars, TEST_TMPDIR=str(tmp_path), TEST_TOTAL_SHARDS=str(shards),
               TEST_SHARD_INDEX=str(index))
    result = subprocess.run([sys.executable, _RUNNER, *(str(tmp_path / f) for f in files)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_garbage_is_collected_between_tests_past_the_budget(tmp_path):
    (tmp_path / "generated_test.py").write_text(GENERATED)
    assert "3 passed" in _run(tmp_path, ["generated_test.py"])


def test_temporary_files_and_subprocesses_stay_in_test_tmpdir(tmp_path):
    (tmp_path / "tmp_test.py").write_text(USES_TEMP_FILES)
    assert "1 passed" in _run(tmp_path, ["tmp_test.py"])


USES_TEMP_FILES = '''
import os
import subprocess
import sys
import tempfile


def test_temporary_files_land_in_test_tmpdir():
    root = os.environ["TEST_TMPDIR"]
    assert tempfile.mkdtemp().startswith(root + os.sep)
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkdtemp())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.startswith(root + os.sep), child.stdout
'''


def test_a_bundle_shards_by_test_file(tmp_path):
    """MOBIUS_SHARD_BY=module: each file's tests land in one shard (its module fixtures are
    built once) and the other shards do not import it; without it, items alternate between
    shards."""
    files = ["a_test.py", "b_test.py", "c_test.py"]
    for name in files:
        (tmp_path / name).write_text(RECORDS_ITS_RUNS)

    def ran(shard: int, **env_vars) -> list[str]:
        log = tmp_path / f"ran-{shard}-{len(env_vars)}.txt"
        _run(tmp_path, files, 2, shard, RAN_LOG=str(log), **env_vars)
        return log.read_text().split()

    assert ran(0, MOBIUS_SHARD_BY="module") == [
        "a_test:import", "c_test:import", "a_test:1", "a_test:2", "c_test:1", "c_test:2"]
    assert ran(1, MOBIUS_SHARD_BY="module") == ["b_test:import", "b_test:1", "b_test:2"]
    assert ran(0) == ["a_test:import", "b_test:import", "c_test:import",
                      "a_test:1", "b_test:1", "c_test:1"]


def test_a_bundle_shard_with_no_test_file_passes(tmp_path):
    """More shards than test files: the shards left without a file pass, and say so."""
    (tmp_path / "a_test.py").write_text(RECORDS_ITS_RUNS)
    log = tmp_path / "ran.txt"
    out = _run(tmp_path, ["a_test.py"], 2, 1, RAN_LOG=str(log), MOBIUS_SHARD_BY="module")
    assert "shard 1/2 got no test file" in out and not log.exists()


RECORDS_ITS_RUNS = '''
import os


def _ran(test):
    with open(os.environ["RAN_LOG"], "a") as log:
        log.write(f"{__name__}:{test}\\n")


_ran("import")


def test_1():
    _ran(1)


def test_2():
    _ran(2)
'''
