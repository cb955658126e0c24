"""mobius_js_test(): a pytest target that drives the Node.js harness of testing/js.

    load("//rules:js.bzl", "mobius_js_test")
    mobius_js_test(name = "ort_js_test", srcs = ["ort_js_test.py"],
                   scripts = ["decoder_runner.mjs"], deps = [...])

No JavaScript ruleset can be fetched offline, so the Python test builds its
packages and references under TEST_TMPDIR and runs `node` on the scripts. The
pinned npm packages come from MOBIUS_NODE_MODULES (./bazelw installs them);
the lock file is data, so changing a pin reruns every JS test.
"""

load("//rules:defs.bzl", "mobius_py_test")

_JS_DATA = [
    "//testing/js:modules.mjs",
    "//testing/js:package-lock.json",
    "//testing/js:replay.mjs",
]

def mobius_js_test(name, srcs, scripts, deps = [], data = [], tags = [], **kwargs):
    # its own process (never test_bundle()'s): each starts Node or Chromium, ~5-45 s
    mobius_py_test(
        name = name,
        bundle = False,
        srcs = srcs,
        data = scripts + data + _JS_DATA,
        deps = deps + ["//testing/js:node"],
        tags = tags + ["js"],
        **kwargs
    )
