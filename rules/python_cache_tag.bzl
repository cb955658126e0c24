"""@python_cache_tag//:defs.bzl: CACHE_TAG, the bytecode tag of the python3 on PATH
("cpython-311"), which names the .pyc files that interpreter looks for in __pycache__/
(rules/bytecode.bzl compiles them at build time)."""

def _python_cache_tag_impl(rctx):
    python = rctx.which("python3")
    if not python:
        fail("python_cache_tag: no python3 on PATH")
    result = rctx.execute([python, "-c", "import sys; print(sys.implementation.cache_tag)"])
    if result.return_code != 0:
        fail("python_cache_tag: %s failed: %s" % (python, result.stderr))
    rctx.file("BUILD.bazel", "")
    rctx.file("defs.bzl", "CACHE_TAG = %r\n" % result.stdout.strip())

python_cache_tag = repository_rule(
    implementation = _python_cache_tag_impl,
    environ = ["PATH"],
    local = True,
)
