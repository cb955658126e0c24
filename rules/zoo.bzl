"""mobius_package: an ONNX package folder built by Bazel from a checkpoint target.

    load("//rules:zoo.bzl", "mobius_package")
    mobius_package(
        name = "tiny-llama-cuda-f16",
        model = "//testing/tiny:tiny-llama",  # a tiny_checkpoint, or a filegroup of a folder
        ep = "cuda",
        dtype = "f16",
    )

The output is the directory <package>/<name>/ (model.onnx, model.onnx.data,
genai_config.json, tokenizer files), written by the mobius CLI (//tools:build)
as one action whose inputs are the checkpoint and the mobius sources: Bazel
rebuilds it only when one of those changes, and caches it (locally, in the disk
cache or a remote cache) like any other output. See docs/zoo.md.
"""

def _checkpoint_dir(files):
    """The checkpoint folder: a tree artifact itself, or the folder holding config.json."""
    if len(files) == 1 and files[0].is_directory:
        return files[0].path
    for f in files:
        if f.basename == "config.json":
            return f.dirname
    fail("mobius_package: model has neither a directory output nor a config.json")

def _mobius_package_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    files = ctx.files.model
    args = [
        "--quiet",
        "--overwrite",
        "--model",
        _checkpoint_dir(files),
        "--ep",
        ctx.attr.ep,
        "--dtype",
        ctx.attr.dtype,
        "--output",
        out.path,
    ] + ctx.attr.extra_args
    ctx.actions.run(
        outputs = [out],
        inputs = files,
        executable = ctx.executable._builder,
        arguments = args,
        mnemonic = "MobiusPackage",
        progress_message = "Building package %s (%s, %s)" % (ctx.label.name, ctx.attr.ep, ctx.attr.dtype),
        use_default_shell_env = True,
        # The sandbox would hand the checkpoint over as symlinks into the
        # execroot, which mobius rightly refuses as links leaving the
        # checkpoint folder; unsandboxed (and remotely) the inputs are the
        # declared files themselves.
        execution_requirements = {"no-sandbox": "1"},
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

mobius_package = rule(
    implementation = _mobius_package_impl,
    doc = "An ONNX package for one EP and dtype, built from a checkpoint target.",
    attrs = {
        "model": attr.label(mandatory = True, allow_files = True, doc = "checkpoint target"),
        "ep": attr.string(default = "default", doc = "execution provider (mobius list eps)"),
        "dtype": attr.string(default = "f32", doc = "f32, f16 or bf16"),
        "extra_args": attr.string_list(doc = "more `mobius build` flags"),
        "_builder": attr.label(default = "//tools:build", executable = True, cfg = "exec"),
    },
)

def model_zoo(name, models, eps, families = {}, exclude = [], tags = ["manual"]):
    """One mobius_package per model x (ep, dtype), named <model>-<ep>-<dtype>, and a
    filegroup :<name> of all of them (`bazel build //pkg:<name>` builds the zoo).

    Args:
      models: {name: checkpoint label}.
      eps: [(ep, dtype), ...].
      families: {name: mobius/models module}, optional: tags the packages
        "family:<module>" so //tools:affected selects only that family's packages
        for a change to its model file (each package is tagged "ep:<ep>" too).
      exclude: ["<model>-<ep>", ...] pairs not to declare (an EP that does not serve the task).
      tags: "manual" by default, so `bazel test //...` builds only the packages a test uses.
    """
    packages = []
    for model, checkpoint in models.items():
        scope = ["family:" + families[model]] if model in families else []
        for ep, dtype in eps:
            if "%s-%s" % (model, ep) in exclude:
                continue
            packages.append("%s-%s-%s" % (model, ep, dtype))
            mobius_package(
                name = packages[-1],
                model = checkpoint,
                ep = ep,
                dtype = dtype,
                tags = tags + scope + ["ep:" + ep.replace("-", "_")],
            )
    native.filegroup(name = name, srcs = packages, tags = tags)
