"""tiny_checkpoint: a built-in tiny random checkpoint as a Bazel-built directory.

    load("//rules:tiny.bzl", "tiny_checkpoint")
    tiny_checkpoint(name = "tiny-llama")   # preset defaults to the name

The output is the directory <package>/<name>/ (config.json, model.safetensors,
tokenizer files), written by //testing:tiny_generate as a build action, so Bazel
caches it like any other output. The action runs in a persistent worker (JSON
protocol, see .bazelrc): one action per checkpoint, one Python start per worker.
A test consumes it through `data` (or mobius_py_test's `tiny = [...]`); the test
runner points $MOBIUS_TINY_DIR at //testing/tiny, where make_tiny_checkpoint(name)
finds it.
"""

load("//rules:families.bzl", _PRESET_FAMILIES = "TINY_PRESET_FAMILIES")

# Every tiny preset -> the mobius/models/<module>.py that declares it (generated from the
# family files into rules/families.bzl by //tools:families). The module names the
# family:<module> scope tag of the preset's packages (//tools:affected).
TINY_PRESET_FAMILIES = _PRESET_FAMILIES

TINY_PRESETS = sorted(TINY_PRESET_FAMILIES.keys())

def _tiny_checkpoint_impl(ctx):
    preset = ctx.attr.preset or ctx.label.name
    out = ctx.actions.declare_directory(ctx.label.name)

    # The arguments travel in a param file (the last argument, "@file"), as a
    # persistent worker needs: .bazelrc runs TinyCheckpoint actions in
    # testing/tiny_generate.py's worker, so its imports are paid once per worker.
    args = ctx.actions.args()
    args.add(preset)
    args.add(out.path)
    args.use_param_file("@%s", use_always = True)
    args.set_param_file_format("multiline")
    ctx.actions.run(
        outputs = [out],
        executable = ctx.executable._generator,
        arguments = [args],
        mnemonic = "TinyCheckpoint",
        progress_message = "Generating tiny checkpoint %s" % preset,
        use_default_shell_env = True,
        execution_requirements = {
            "requires-worker-protocol": "json",
            "supports-workers": "1",
        },
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

tiny_checkpoint = rule(
    implementation = _tiny_checkpoint_impl,
    doc = "A built-in tiny checkpoint (a family file's TINY_PRESETS) generated at build time.",
    attrs = {
        "preset": attr.string(doc = "Preset name; defaults to the target name."),
        "_generator": attr.label(
            default = "//testing:tiny_generate",
            executable = True,
            cfg = "exec",
        ),
    },
)

def _hf_checkpoints_impl(ctx):
    out = ctx.actions.declare_directory(ctx.label.name)
    ctx.actions.run(
        outputs = [out],
        executable = ctx.executable._writer,
        arguments = [out.path] + ctx.attr.presets,
        mnemonic = "HfCheckpoints",
        progress_message = "Writing %d transformers tiny checkpoints" % len(ctx.attr.presets),
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

hf_checkpoints = rule(
    implementation = _hf_checkpoints_impl,
    doc = """Tiny checkpoints written by transformers itself (testing/hf_checkpoints.py, seed 0),
    one subdirectory per preset, in one action (torch is imported once). Output:
    <package>/<name>/<preset>/; testing.hf_checkpoints.prebuilt_hf_checkpoint finds them.""",
    attrs = {
        "presets": attr.string_list(mandatory = True),
        "_writer": attr.label(
            default = "//testing:write_hf_checkpoints",
            executable = True,
            cfg = "exec",
        ),
    },
)
