"""Shared Bazel test runner: runs pytest on the test file(s) given as arguments.

Used by ``mobius_py_test`` (//rules:defs.bzl); also runnable by hand from the
repository root::

    python3 testing/run_pytest.py mobius/ep/registry_test.py [-k name]

It honours Bazel's test protocol:

* ``TEST_TOTAL_SHARDS`` / ``TEST_SHARD_INDEX``: shard *i* runs every N-th
  collected test (items i, i+N, i+2N, ...); ``TEST_SHARD_STATUS_FILE`` is
  touched to tell Bazel that sharding is supported.
* ``XML_OUTPUT_FILE``: JUnit XML report.
* ``TESTBRIDGE_TEST_ONLY`` (``bazel test --test_filter=EXPR``): passed to
  pytest as ``-k EXPR``.
* ``TEST_TMPDIR``: pytest's ``--basetemp`` (``tmp_path`` lands in the sandbox),
  ``TMPDIR`` (``tempfile`` and every subprocess: a pytest or tool a test starts), and
  the root of every cache a test may fill (``MOBIUS_CACHE``, ``XDG_CACHE_HOME``), so
  that no test writes under ``$HOME`` or ``/tmp`` (Bazel 4 sets no ``TMPDIR``).

Threads: onnxruntime sessions a test creates without a thread count get one intra-op
thread (testing/session_threads.py; .bazelrc gives OpenMP and OpenBLAS one): Bazel runs
two tests at a time on two cores.

``MOBIUS_GPU_SITE`` (``--config=gpu``): a folder with onnxruntime's GPU wheels, put
ahead of the CPU ones on ``sys.path``.

``MOBIUS_TINY_DIR`` points at the runfiles' ``testing/tiny``, where the
``tiny_checkpoint`` targets in a test's data land (see //rules:tiny.bzl).

The exit code is pytest's, except that "no tests collected" (5) counts as a
failure unless this is a shard that legitimately got no tests (fewer tests than
shards).
"""

from __future__ import annotations

import gc
import os
import sys

gc.disable()  # see _QuietCollector


def _workspace_root() -> str:
    """The directory that holds ``mobius/``: runfiles root under Bazel."""
    srcdir = os.environ.get("TEST_SRCDIR") or os.environ.get("RUNFILES_DIR")
    workspace = os.environ.get("TEST_WORKSPACE", "mobius")
    if srcdir:
        candidate = os.path.join(srcdir, workspace)
        if os.path.isdir(candidate):
            return os.path.abspath(candidate)
    # Outside Bazel: this file is <root>/testing/run_pytest.py.
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_ROOT = _workspace_root()
# `import mobius` must resolve to <root>/mobius, ahead of anything the Python
# stub put on sys.path (e.g. the runfiles directory itself).
if sys.path[:1] != [_ROOT]:
    sys.path.insert(0, _ROOT)



def _gpu_site() -> None:
    """--config=gpu: onnxruntime-gpu / genai-cuda from their own folder (see ./bazelw)."""
    site = os.environ.get("MOBIUS_GPU_SITE")
    if site:
        if not os.path.isdir(site):
            raise SystemExit(f"run_pytest: MOBIUS_GPU_SITE={site} does not exist")
        sys.path.insert(1, site)


def _hermetic_env() -> None:
    """Caches into TEST_TMPDIR, Bazel-built tiny checkpoints where mobius looks, and no
    pytest plugins but ours.

    Autoloading the machine's pytest plugins (hypothesis, anyio+trio, pytest-benchmark)
    cost ~1.1 s of CPU per test process, over 200 processes a suite, and made a run
    depend on what else happens to be pip-installed. Hypothesis works without its plugin.
    """
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    tmp = os.environ.get("TEST_TMPDIR")
    if tmp:
        os.environ["TMPDIR"] = tmp
        os.environ.setdefault("MOBIUS_CACHE", os.path.join(tmp, "mobius-cache"))
        os.environ.setdefault("XDG_CACHE_HOME", os.path.join(tmp, "xdg-cache"))
    tiny = os.path.join(_ROOT, "testing", "tiny")
    if os.path.isdir(tiny):
        os.environ.setdefault("MOBIUS_TINY_DIR", tiny)


_hermetic_env()
_gpu_site()

import pytest  # noqa: E402  (after the sys.path fix-up on purpose)

from testing.garbage_budget import GarbageBudget  # noqa: E402
from testing.session_threads import default_to_one_thread  # noqa: E402

NO_TESTS_COLLECTED = 5


SHARD_GROUP = "shard_group"


class _ShardPlugin:
    """Keeps items ``index, index + total, ...`` of the collected tests.

    Tests marked ``@pytest.mark.shard_group(key)`` are sharded by group
    instead: all tests of one key run in the same shard (the i-th distinct
    key goes to shard i % total), so expensive per-key setup -- e.g. a tiny
    checkpoint and its builds, cached per module -- is paid in one shard only.
    A bundle sharded by module (``_own_files``) hands this shard only its own files.
    """

    def __init__(self, total: int, index: int) -> None:
        self.total = total
        self.index = index
        self.collected = 0
        self.selected = 0

    def pytest_configure(self, config):
        config.addinivalue_line(
            "markers", f"{SHARD_GROUP}(key): run all tests with this key in one Bazel shard")

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config, items):
        self.collected = len(items)
        if self.total <= 1:
            self.selected = len(items)
            return
        keep, drop, groups = [], [], {}
        for i, item in enumerate(items):
            marker = item.get_closest_marker(SHARD_GROUP)
            key = marker.args[0] if marker else None
            slot = i if key is None else groups.setdefault(key, len(groups))
            (keep if slot % self.total == self.index else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep
        self.selected = len(keep)


class _QuietCollector:
    """The cyclic garbage collector, run only where it pays in a short-lived test process
    (testing/garbage_budget.py says why): none while modules are imported and tests
    collected (this file disables it first thing); then one, and ``gc.freeze()`` of what
    survived (~400k module objects); then one between tests whenever the resident size
    has grown by a GiB. pytest's own collections at exit (five, to surface exceptions
    from finalizers) become one."""

    def __init__(self) -> None:
        self.garbage = GarbageBudget()

    def pytest_configure(self, config):
        from _pytest.unraisableexception import gc_collect_iterations_key

        config.stash[gc_collect_iterations_key] = 1

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        self.garbage.start()

    def pytest_runtest_logfinish(self, nodeid, location):
        self.garbage.step()


COLLECTOR = _QuietCollector()


class _OneThreadSessions:
    """testing/session_threads.py, from when onnxruntime is imported: before each test's
    setup (its fixtures), so once a test module, fixture or earlier test imported it."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        default_to_one_thread()


def _own_files(argv: list[str], total: int, index: int) -> list[str]:
    """``MOBIUS_SHARD_BY=module`` (a sharded test_bundle of //rules:defs.bzl): the i-th test
    file given goes to shard i % total, with all its tests (its module fixtures are built
    once); the other shards' files are left out before pytest imports them (a bundle's test
    modules import much of mobius and of its references)."""
    files = [a for a in argv if a.endswith(".py")]
    return [a for a in argv if a not in files or files.index(a) % total == index]


def _shard_env() -> tuple[int, int]:
    total = int(os.environ.get("TEST_TOTAL_SHARDS", "1") or "1")
    index = int(os.environ.get("TEST_SHARD_INDEX", "0") or "0")
    status_file = os.environ.get("TEST_SHARD_STATUS_FILE")
    if status_file:
        with open(status_file, "a"):
            pass
    if total < 1 or not 0 <= index < total:
        raise SystemExit(f"run_pytest: bad shard {index} of {total}")
    return total, index


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: run_pytest.py TEST_FILE.py [...] [pytest args]", file=sys.stderr)
        return 2
    total, index = _shard_env()
    if os.environ.get("MOBIUS_SHARD_BY") == "module" and total > 1:
        argv = _own_files(argv, total, index)
        if not any(a.endswith(".py") for a in argv):
            print(f"run_pytest: shard {index}/{total} got no test file; OK")
            return 0
        total, index = 1, 0
    plugin = _ShardPlugin(total, index)

    args = ["-q", "-p", "no:cacheprovider", f"--rootdir={_ROOT}"]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        args.append(f"--junitxml={xml}")
    tmp = os.environ.get("TEST_TMPDIR")
    if tmp:
        args.append(f"--basetemp={os.path.join(tmp, 'pytest')}")
    test_filter = os.environ.get("TESTBRIDGE_TEST_ONLY")
    if test_filter:
        args += ["-k", test_filter]
    args += argv

    code = int(pytest.main(args, plugins=[plugin, COLLECTOR, _OneThreadSessions()]))
    if code == NO_TESTS_COLLECTED:
        if total > 1 and plugin.collected > 0 and plugin.selected == 0:
            print(f"run_pytest: shard {index}/{total} got no tests "
                  f"({plugin.collected} collected in all); OK")
            return 0
        print("run_pytest: no tests collected; failing", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
