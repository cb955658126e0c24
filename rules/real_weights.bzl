"""real_checkpoint: a real-weights folder (testing/real_weights.py) as a Bazel-built directory.

    load("//rules:real_weights.bzl", "real_checkpoint")
    real_checkpoint(name = "smollm2", testonly = True)   # model defaults to the name

SmolLM2's float folder is dequantized from its GGUF by transformers (~16 s of CPU,
540 MB): as a build output it is made once and cached, and every test target that
lists it in `data` reads the same directory (testing.real_weights.smollm2_for_tests
finds it through $MOBIUS_SMOLLM2 = its $(rootpath)).
"""

def _real_checkpoint_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    ctx.actions.run(
        outputs = [out],
        executable = ctx.executable._writer,
        arguments = [ctx.attr.model or ctx.label.name, out.path],
        mnemonic = "RealCheckpoint",
        progress_message = "Writing real-weights folder %s" % ctx.label.name,
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

real_checkpoint = rule(
    implementation = _real_checkpoint_impl,
    doc = "A real-weights folder (testing/write_real_checkpoint.py) written at build time.",
    attrs = {
        "model": attr.string(doc = "smollm2 or minilm; defaults to the target name."),
        "_writer": attr.label(
            default = "//testing:write_real_checkpoint",
            executable = True,
            cfg = "exec",
        ),
    },
)
