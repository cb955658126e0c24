"""ep_suite(): the standard test target of one built-in EP, in its folder ep/<dir>/.

    load("//rules:ep_suite.bzl", "ep_suite")
    ep_suite()      # in ep/<dir>/BUILD.bazel (//tools:eps writes it for a new EP)

expands into
  :builds       every build the suite looks at, made once: this EP's share of
                //ep:suite_builds (ep_suite_builds(), testing/write_ep_builds.py)
  :suite        one pytest process over the EP's three tiers:
                L2 fusion: expectation table per build dtype (<dir>_fusion_test.py, the
                EP's one hand-written test file);
                L3 parity: EP graph vs generic graph on onnxruntime's CPU EP (the shared
                ep/parity_test.py, or <dir>_parity_test.py where the EP has its own), the
                generic graph's side read from //ep:generic_runs (ep_generic_runs());
                L5 golden: op-histogram snapshots in golden/<family>.json, and the --quant
                int4 build's checks (ep/int4_checks.py) and snapshots in
                golden_int4/<family>.json (the shared ep/golden_test.py)
  :fusion, :parity, :golden   test_suites naming :suite (what the tiers were called when
                each was its own process)
The shared test files read the EP's name from $MOBIUS_EP, which the macro sets.

Why one process for three tiers: the tiers read the same builds, and parsing a stored
build into onnx_ir (~25 ms a model, ~700 models an EP) plus the ~5 s of imports was
paid three times per EP; ep/conftest.py's session-scoped `builds` fixture parses each
once. Run one tier alone with pytest's -k through --test_arg, or plain pytest on its
file with MOBIUS_EP set.
"""

load("//rules:defs.bzl", "mobius_py_test")
load("//rules:eps.bzl", "EP_PRIMARY_DTYPES")

# transformers' tiny checkpoints, built once (testing/ep_suite.Checkpoints reads them).
_DATA = ["//testing/tiny:hf"]

# The generic graphs every EP's fusion and parity tables compare against.
_GENERIC_BUILDS = "//ep/default:builds"

# The generic graph's runs every other EP's parity target reads (ep_suite_generic_runs()).
_GENERIC_RUNS = "//ep:generic_runs"

# The EP suites' builds (//ep:suite_builds), split by family over this many actions so that
# both cores of a 2-core machine build.
_SHARDS = 2

def _dir_of(ep):
    return ep.replace("-", "_")

def _ep_builds_impl(ctx):
    hf = ctx.file.checkpoints
    groups = {_dir_of(ep): [] for ep in ctx.attr.eps}
    for shard in range(_SHARDS):
        outs = {ep: ctx.actions.declare_file(
            "%s/%d/%s.zip" % (ctx.label.name, shard, _dir_of(ep)),
        ) for ep in ctx.attr.eps}
        ctx.actions.run(
            outputs = outs.values(),
            inputs = [hf],
            executable = ctx.executable._writer,
            arguments = [hf.path, str(shard), str(_SHARDS)] +
                        ["%s=%s" % (ep, out.path) for ep, out in outs.items()],
            mnemonic = "EpBuilds",
            progress_message = "Building the EP suites' tiny packages (%d of %d)" % (
                shard + 1,
                _SHARDS,
            ),
            use_default_shell_env = True,
        )
        for ep, out in outs.items():
            groups[_dir_of(ep)].append(out)
    every = [out for outs in groups.values() for out in outs]

    # runfiles too: a Starlark rule's files reach a test's runfiles through `data` only
    # when DefaultInfo names them as runfiles (a filegroup of them does that itself).
    return [
        DefaultInfo(files = depset(every), runfiles = ctx.runfiles(files = every)),
        OutputGroupInfo(**{d: depset(outs) for d, outs in groups.items()}),
    ]

ep_builds = rule(
    implementation = _ep_builds_impl,
    doc = """Every build the EP suites' fusion, parity and golden targets look at, made once
    (testing/write_ep_builds.py): one archive <package>/<name>/<shard>/<ep dir>.zip per EP
    and shard (testing/ep_builds.py), which testing/ep_suite.Builds loads instead of
    building again in each test process; output group <ep dir> holds one EP's. Each action builds its
    families for every EP, constructing a family's generic graphs once per dtype.""",
    attrs = {
        "eps": attr.string_list(mandatory = True),
        "checkpoints": attr.label(default = "//testing/tiny:hf", allow_single_file = True),
        "_writer": attr.label(
            default = "//testing:write_ep_builds",
            executable = True,
            cfg = "exec",
        ),
    },
)

def ep_suite_builds(name):
    """The built-in EPs' suite builds (EP_PRIMARY_DTYPES: every built-in EP), in //ep."""
    ep_builds(
        name = name,
        eps = sorted(EP_PRIMARY_DTYPES.keys()),
        testonly = True,
        # the MoE families' L1 tests read every EP's builds of their presets, the JS
        # runtimes' replay test the decoder families' f32 ones
        visibility = ["//ep:__subpackages__", "//mobius/models:__pkg__", "//testing/js:__pkg__"],
    )

def _ep_generic_runs_impl(ctx):
    outs = []
    for i, builds in enumerate(ctx.files.builds):  # one per ep_builds shard
        out = ctx.actions.declare_directory("%s/%d" % (ctx.label.name, i))
        ctx.actions.run(
            outputs = [out],
            inputs = [builds],
            executable = ctx.executable._writer,
            arguments = [builds.path, out.path],
            mnemonic = "EpGenericRuns",
            progress_message = "Running the generic graphs of the EP parity suites (%d of %d)" % (
                i + 1,
                len(ctx.files.builds),
            ),
            use_default_shell_env = True,
        )
        outs.append(out)

    # runfiles: without them `data = ["//ep:generic_runs"]` brought nothing into the parity
    # targets' runfiles, and every EP target re-ran the generic graphs (generic_runs.roots()).
    return [DefaultInfo(files = depset(outs), runfiles = ctx.runfiles(files = outs))]

ep_generic_runs = rule(
    implementation = _ep_generic_runs_impl,
    doc = """The generic graph's runs every EP's parity target compares with, made once per
    shard of the default EP's builds (testing/write_generic_runs.py): directories
    <package>/<name>/<shard>/, which testing/generic_runs.load reads instead of running
    the same generic session in each EP's parity target.""",
    attrs = {
        "builds": attr.label(default = _GENERIC_BUILDS, allow_files = True),
        "_writer": attr.label(
            default = "//testing:write_generic_runs",
            executable = True,
            cfg = "exec",
        ),
    },
)

def ep_suite_generic_runs(name):
    """The EP parity suites' generic runs (ep_generic_runs()), in //ep."""
    ep_generic_runs(
        name = name,
        testonly = True,
        visibility = ["//ep:__subpackages__"],
    )

_DEPS = [
    "//ep:fusion_suite",
    "//ep:golden_suite",
    "//ep:init",
    "//testing:ep_suite",
]

def _own_or_shared(ep_dir, tier):
    """<dir>_<tier>_test.py where the EP has its own, else //ep:<tier>_test.py."""
    own = native.glob(["%s_%s_test.py" % (ep_dir, tier)], allow_empty = True)
    return own or ["//ep:%s_test.py" % tier]

def ep_suite(shards = 1):
    ep_dir = native.package_name().split("/")[-1]
    names = [ep for ep in EP_PRIMARY_DTYPES if _dir_of(ep) == ep_dir]
    if not names:
        fail("ep_suite() in %s: no EP file mobius/ep/%s.py (rules/eps.bzl)" % (
            native.package_name(),
            ep_dir,
        ))

    # "ep:<dir>" is the scope tag //tools:affected matches against //mobius/ep:<dir>.
    tags = ["ep:" + ep_dir]
    native.filegroup(
        name = "builds",
        srcs = ["//ep:suite_builds"],
        output_group = ep_dir,
        tags = tags,
        testonly = True,
        # read by //mobius/models:families_test (default) and //mobius/quantize:quality_test (cpu)
        visibility = [
            "//ep:__subpackages__",
            "//mobius/models:__pkg__",
            "//mobius/quantize:__pkg__",
        ],
    )
    generic = [] if ep_dir == "default" else [_GENERIC_BUILDS, _GENERIC_RUNS]
    parity = _own_or_shared(ep_dir, "parity")

    # the shared ep/parity_test.py runs ep/parity_suite.py; an EP's own uses testing/ep_parity.py
    parity_lib = "//ep:parity_suite" if parity[0].startswith("//") else "//testing:ep_parity"
    mobius_py_test(
        name = "suite",
        size = "medium",
        srcs = [ep_dir + "_fusion_test.py"] + parity + _own_or_shared(ep_dir, "golden"),
        shard_count = shards,
        tags = tags,
        env = {"MOBIUS_EP": names[0]},
        data = _DATA + [":builds"] + generic + native.glob(
            ["golden/*.json", "golden_int4/*.json"],
            allow_empty = True,
        ),
        deps = _DEPS + [parity_lib],
    )
    for tier in ("fusion", "parity", "golden"):
        native.test_suite(
            name = tier,
            tests = [":suite"],
            tags = tags,
        )
