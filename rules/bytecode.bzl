"""py_bytecode: the first-party modules a test imports, compiled at build time.

Tests run with PYTHONDONTWRITEBYTECODE (a test writes only under its TEST_TMPDIR), so
without this every test process compiled each mobius / testing module it imported from
source again (~0.35 s a process, ~200 processes a suite). The aspect compiles each
py_library's / py_binary's sources once, in one action per library (checked-hash .pyc:
valid whatever the source file's mtime), run by rules/py_compile_worker.py as a persistent
worker (Python starts once per core, not once per library), and mobius_py_test links
them into its runfiles as <dir>/__pycache__/<module>.<CACHE_TAG>.pyc, where the
interpreter looks for them.
"""

load("@python_cache_tag//:defs.bzl", "CACHE_TAG")

PycInfo = provider(
    doc = "Compiled first-party modules: (runfiles path, .pyc File) pairs.",
    fields = {"pycs": "depset of (runfiles path, File) tuples"},
)

def _runfiles_path(src):
    folder, _, base = src.short_path.rpartition("/")
    pyc = "__pycache__/%s.%s.pyc" % (base[:-len(".py")], CACHE_TAG)
    return folder + "/" + pyc if folder else pyc

def _pyc_aspect_impl(target, ctx):
    transitive = [dep[PycInfo].pycs for dep in getattr(ctx.rule.attr, "deps", []) if PycInfo in dep]
    direct = []
    if ctx.rule.kind in ("py_library", "py_binary"):
        srcs = [f for f in ctx.rule.files.srcs if f.is_source and f.extension == "py"]
        args = ctx.actions.args()
        for src in srcs:
            # one output per (target, source): a source in two targets' srcs gives two
            # identical files behind one runfiles path, never two actions for one output
            out = ctx.actions.declare_file("%s.pyc/%s.pyc" % (target.label.name, src.short_path))
            direct.append((_runfiles_path(src), out))
            args.add(src.path)
            args.add(out.path)
        if srcs:
            # a param file (the last argument, "@file"), as a persistent worker needs
            args.use_param_file("@%s", use_always = True)
            args.set_param_file_format("multiline")
            ctx.actions.run(
                executable = ctx.executable._compiler,
                arguments = [args],
                inputs = srcs,
                outputs = [out for _, out in direct],
                mnemonic = "PyCompile",
                # writes only its declared outputs; a sandbox would cost more than the compile
                execution_requirements = {
                    "no-sandbox": "1",
                    "requires-worker-protocol": "json",
                    "supports-workers": "1",
                },
                progress_message = "Compiling %s" % target.label,
                use_default_shell_env = True,
            )
    return [PycInfo(pycs = depset(direct, transitive = transitive))]

pyc_aspect = aspect(
    implementation = _pyc_aspect_impl,
    attr_aspects = ["deps"],
    attrs = {
        "_compiler": attr.label(
            default = "//rules:py_compile_worker",
            executable = True,
            cfg = "exec",
        ),
    },
)

def _py_bytecode_impl(ctx):
    symlinks = {}
    for dep in ctx.attr.deps:
        for path, pyc in dep[PycInfo].pycs.to_list():
            symlinks[path] = pyc
    return [DefaultInfo(runfiles = ctx.runfiles(symlinks = symlinks))]

py_bytecode = rule(
    implementation = _py_bytecode_impl,
    doc = "The .pyc of every first-party module in deps' closure, as runfiles beside the sources.",
    attrs = {"deps": attr.label_list(aspects = [pyc_aspect])},
)
