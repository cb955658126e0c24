"""Starlark macros for mobius BUILD files.

    load("//rules:defs.bzl", "mobius_py_test")

Python dependencies installed by pip are referenced as //third_party:<name>
(e.g. "//third_party:onnx"); see //third_party:BUILD.bazel.
"""

load("//rules:bytecode.bzl", "py_bytecode")

_RUNNER = "//testing:run_pytest.py"
_RUNNER_DEPS = ("//testing:garbage_budget", "//testing:session_threads", "//third_party:pytest")

#: tags that keep a test in its own process: it needs a device (gpu) or the whole machine
#: (exclusive)
_OWN_PROCESS_TAGS = ("exclusive", "gpu")

#: what test_bundle() adds to a bundled test's tags: `bazel test //...` runs the package's
#: bundle, and the test itself only when named
_BUNDLED_TAGS = ["bundled", "manual"]

def _is_test_file(path):
    base = path.split(":")[-1].split("/")[-1]
    return base.endswith("_test.py") or base.startswith("test_")

def mobius_py_test(
        name,
        srcs,
        deps = [],
        size = "small",
        tags = [],
        shard_count = None,
        data = [],
        tiny = [],
        references = [],
        bundle = True,
        **kwargs):
    """A py_test that runs pytest on `srcs` through //testing:run_pytest.py.

    A test the package's test_bundle() runs is tagged "bundled" and "manual": `bazel test
    //...` runs the bundle, `bazel test //pkg:name` this test alone.

    Args:
      name: target name.
      srcs: the pytest file(s) (`*_test.py` / `test_*.py`) plus any helper
        modules. Only the test files are handed to pytest; if none matches
        the naming pattern, every file in srcs is.
      deps: py_library deps, e.g. ["//mobius/ep", "//third_party:onnx"].
        //third_party:pytest and the runner's //testing:garbage_budget and
        //testing:session_threads are added automatically.
      size: Bazel test size ("small" = 60 s timeout, "medium" = 300 s, ...).
      tags: Bazel tags; "gpu" keeps the test out of the default `bazel test`.
      shard_count: optional number of shards; shard i runs every N-th test.
      data: runtime files.
      tiny: built-in tiny checkpoint names the test builds by name (e.g.
        mobius.build("tiny-llama")); each adds //testing/tiny:<name> to data,
        a Bazel-built directory the runner makes mobius read.
      references: reference_cases() labels (//rules:references.bzl) whose
        build-time transformers outputs the test reads; each adds the cases
        library to deps and its <name>_out directory to data.
      bundle: whether the package's test_bundle() runs this test, in one pytest process
        with the package's other small tests (a test process spends ~1.5 s importing
        before its first check). False for a test long enough to be worth its own
        process, or one that needs a process of its own (what it imports, its environment).
        A test with shards, args, env, or an own-process tag (exclusive, gpu) is never
        bundled.
      **kwargs: passed on to py_test (args are appended to pytest's argv,
        e.g. args = ["-k", "not slow"]; env, timeout, flaky, visibility, ...).
    """
    if not srcs:
        fail("mobius_py_test(%s): srcs must not be empty" % name)
    test_srcs = [s for s in srcs if _is_test_file(s)] or srcs
    extra_args = kwargs.pop("args", [])
    test_deps = list(deps) + [r for r in references if r not in deps]
    for runner_dep in _RUNNER_DEPS:
        if runner_dep not in test_deps:
            test_deps.append(runner_dep)
    if bundle and not (shard_count or extra_args or [k for k in kwargs if k != "visibility"] or
                       [t for t in tags if t in _OWN_PROCESS_TAGS]):
        tags = tags + _BUNDLED_TAGS
    _runner_test(
        name = name,
        srcs = srcs + [_RUNNER],
        args = ["$(rootpath %s)" % s for s in test_srcs] + extra_args,
        deps = test_deps,
        data = data + ["//testing/tiny:" + t for t in tiny] + [r + "_out" for r in references],
        size = size,
        tags = tags,
        shard_count = shard_count,
        **kwargs
    )

def _runner_test(name, deps, data, **kwargs):
    """The py_test running //testing/run_pytest.py, with its deps' bytecode (:<name>_pyc)."""
    py_bytecode(
        name = name + "_pyc",
        testonly = True,
        deps = deps,
    )
    native.py_test(
        name = name,
        main = _RUNNER,
        deps = deps,
        data = data + [":" + name + "_pyc"],
        python_version = "PY3",
        srcs_version = "PY3",
        **kwargs
    )

def test_bundle(name = "tests", shard_count = None):
    """One py_test that runs every bundled mobius_py_test of this package in one pytest process.

    Call it after the mobius_py_test targets of a BUILD file (tools/deps_check.py fails a
    bundled test no bundle runs). Its srcs, deps, data and args are the union of the
    members'; its size medium (5 minutes), or its largest member's if that is larger.
    Tagged "test_bundle": //tools:affected selects the members themselves.

    Args:
      name: the bundle's name.
      shard_count: optional; shards split the bundle by test file (each file's tests in
        one shard, so its module fixtures are built once).
    """
    rules = native.existing_rules()
    members = [
        rules[key]
        for key in sorted(rules)
        if rules[key]["kind"] == "py_test" and "bundled" in rules[key]["tags"]
    ]
    if members:
        _bundle(name, members, shard_count)

def _bundle(name, members, shard_count):
    # the runner as the members spell it (inside //testing, ":run_pytest.py"): listed once
    runner = [s for s in members[0]["srcs"] if s.endswith("run_pytest.py")]
    srcs, deps, data, args, tags = [], [], [], [], []
    for member in members:
        pyc = member["name"] + "_pyc"
        own_pyc = [":" + pyc, "//%s:%s" % (native.package_name(), pyc)]
        srcs += [s for s in member["srcs"] if s not in srcs + runner]
        deps += [d for d in member["deps"] if d not in deps]
        data += [d for d in member["data"] if d not in data + own_pyc]
        args += [a for a in member["args"] if a not in args]
        tags += [t for t in member["tags"] if t not in tags + _BUNDLED_TAGS]
    sizes = [r["size"] for r in members]
    size = "enormous" if "enormous" in sizes else "large" if "large" in sizes else "medium"
    _runner_test(
        name = name,
        srcs = srcs + runner,
        args = args,
        deps = deps,
        data = data,
        size = size,
        shard_count = shard_count,
        env = {"MOBIUS_SHARD_BY": "module"} if shard_count else {},
        tags = tags + ["test_bundle"],
    )

def package_files(exclude = []):
    """:package_files, every file of this package (its BUILD file too), for //:source_tree.

    A test that reads the source tree (tools/deps_test.py, the generators' tests) takes
    //:source_tree as data and reads the tree in its runfiles: Bazel reruns it when one of
    these files changes, and never serves it a file no package declares.

    Args:
      exclude: more glob patterns to leave out (the root's: Bazel's convenience links).
    """
    native.filegroup(
        name = "package_files",
        srcs = native.glob(["**"], exclude = ["**/__pycache__/**"] + exclude),
        visibility = ["//:__pkg__"],
    )

def _source_tree_impl(ctx):
    files = depset(transitive = [src[DefaultInfo].files for src in ctx.attr.srcs])
    manifest = ctx.actions.declare_file(ctx.label.name + ".txt")
    ctx.actions.write(manifest, "".join([f.short_path + "\n" for f in files.to_list()]))
    return [DefaultInfo(
        files = depset([manifest]),
        runfiles = ctx.runfiles(files = [manifest], transitive_files = files),
    )]

source_tree = rule(
    implementation = _source_tree_impl,
    doc = """Every package's :package_files as runfiles, and <name>.txt listing them (one
    workspace-relative path a line): what a copy of the tree copies, leaving out the
    built files that share its folders in the runfiles.""",
    attrs = {"srcs": attr.label_list(allow_files = True)},
)

def model_test(name, deps_by_module, srcs = [], **kwargs):
    """mobius_py_test <name> of mobius/models/<name>.py (plus srcs: more test files it runs).

    Its deps are its files' (deps_by_module: rules/model_tests.bzl, read from their
    imports); the :<x>_cases among them are its references (their outputs are data).
    """
    srcs = sorted([name + ".py"] + srcs)
    deps = _deps([d for s in srcs for d in deps_by_module[s[:-len(".py")]]], [])
    cases = [d for d in deps if d.startswith(":") and d.endswith("_cases")]
    mobius_py_test(
        name = name,
        srcs = srcs,
        deps = [d for d in deps if d not in cases],
        references = cases,
        **kwargs
    )

def model_tests(deps_by_module, attrs):
    """model_test() for every <x>_test module of deps_by_module but those another's srcs run.

    attrs: test name -> what its imports do not say (size, data, tags, srcs, ...).
    """
    for name in attrs:
        if name not in deps_by_module:
            fail("model_tests: %s is not a test module of rules/model_tests.bzl" % name)
    folded = [s[:-len(".py")] for a in attrs.values() for s in a.get("srcs", [])]
    for module in deps_by_module:
        if module.endswith("_test") and module not in folded:
            model_test(name = module, deps_by_module = deps_by_module, **attrs.get(module, {}))

def _deps(deps, implied):
    """deps + implied, without duplicates, in buildifier order (":x" before "//x")."""
    merged = {d: True for d in deps + implied}.keys()
    local = sorted([d for d in merged if d.startswith(":")])
    return local + sorted([d for d in merged if not d.startswith(":")])

def mobius_model(name, deps = [], tags = [], **kwargs):
    """A model family module mobius/models/<name>.py: py_library :<name>.

    Adds :init and :family to deps, and the tag "family:<name>" by which
    //tools:affected scopes a change to this file (family tests, EP suites).
    """
    native.py_library(
        name = name,
        srcs = [name + ".py"],
        deps = _deps(deps, [":family", ":init"]),
        tags = ["family:" + name] + tags,
        **kwargs
    )

def rewrite_rule(name, deps = [], tags = [], **kwargs):
    """A rewrite rule module mobius/rewrite/<name>.py: py_library :<name>.

    Adds :init and :rule to deps, and the tag "rule:<name>" (see mobius_model).
    A test that depends on :<name> directly is that rule's test.
    """
    native.py_library(
        name = name,
        srcs = [name + ".py"],
        deps = _deps(deps, [":init", ":rule"]),
        tags = ["rule:" + name] + tags,
        **kwargs
    )

def ep_capabilities(name, deps = [], tags = [], **kwargs):
    """One built-in EP's capability record mobius/ep/<name>.py: py_library :<name>.

    Adds :init and :capabilities to deps, and the tag "ep:<name>"
    (ep_suite() tags the suite under ep/<name>/ the same way).
    """
    native.py_library(
        name = name,
        srcs = [name + ".py"],
        deps = _deps(deps, [":capabilities", ":init"]),
        tags = ["ep:" + name] + tags,
        **kwargs
    )
