"""reference_cases: transformers reference outputs as cached build outputs.

    load("//rules:references.bzl", "reference_cases")
    reference_cases(name = "dense_families_cases", deps = ["//testing:random_checkpoint"])
    mobius_py_test(name = "dense_families_test", ..., references = [":dense_families_cases"])

<name>.py is a test's torch side: ``CASES`` (the case names) and ``write_case(case,
folder)``, which writes whatever the test compares against (a checkpoint, a
testing/decoder_reference.py recording, expected tokens) into ``folder``. The macro
makes it a py_library ``<name>`` (the test imports CASES from it) and the directory
``<name>_out/<case>/`` that //testing:write_references fills by calling write_case once
per case. That tool is a persistent worker (.bazelrc: TransformersReferences), so torch
and transformers are imported once per worker instead of once per test process; the
test reads the directory (testing/reference_cases.case_dir) and imports neither.

A cases module may import only what //testing:write_references depends on (the
worker's runfiles): add a library there when a new cases module needs one.
"""

def _reference_outputs_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    cases = ctx.file.cases
    args = ctx.actions.args()
    args.add(cases.path)
    args.add(out.path)
    args.add_all([
        "%s=%s" % (key, ctx.expand_location(value, ctx.attr.data))
        for key, value in sorted(ctx.attr.env.items())
    ])
    args.use_param_file("@%s", use_always = True)
    args.set_param_file_format("multiline")
    ctx.actions.run(
        outputs = [out],
        inputs = [cases] + ctx.files.data,
        executable = ctx.executable._writer,
        arguments = [args],
        mnemonic = "TransformersReferences",
        progress_message = "Writing transformers references of %s" % cases.short_path,
        use_default_shell_env = True,
        execution_requirements = {
            "requires-worker-protocol": "json",
            "supports-workers": "1",
        },
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

_reference_outputs = rule(
    implementation = _reference_outputs_impl,
    doc = "write_case(case, <name>/<case>) for every case of a cases module, in one action.",
    attrs = {
        "cases": attr.label(allow_single_file = [".py"], mandatory = True),
        "data": attr.label_list(allow_files = True, doc = "Files write_case reads."),
        "env": attr.string_dict(doc = "Set while write_case runs; $(execpath) of data expands."),
        "_writer": attr.label(
            default = "//testing:write_references",
            executable = True,
            cfg = "exec",
        ),
    },
)

def reference_cases(name, deps = [], data = [], env = {}, **kwargs):
    """py_library <name> (srcs <name>.py, testonly) and its outputs <name>_out (see above).

    data / env: build outputs write_case reads (a real checkpoint) and the environment
    variables, set for the request only, that name them (like a test's data and env).
    """
    native.py_library(
        name = name,
        testonly = True,
        srcs = [name + ".py"],
        deps = deps,
        **kwargs
    )
    _reference_outputs(
        name = name + "_out",
        testonly = True,
        cases = name + ".py",
        data = data,
        env = env,
    )
