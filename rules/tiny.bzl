"""tiny_checkpoint: a built-in tiny random checkpoint as a Bazel-built directory.

    load("//rules:tiny.bzl", "tiny_checkpoint")
    tiny_checkpoint(name = "tiny-llama")   # preset defaults to the name

The output is the directory <package>/<name>/ (config.json, model.safetensors,
tokenizer files), written by //mobius/tiny:generate as a build action, so Bazel
caches it like any other output. A test consumes it through `data` (or
mobius_py_test's `tiny = [...]`); the test runner points $MOBIUS_TINY_DIR at
//testing/tiny, where make_tiny_checkpoint(name) finds it.
"""

# Every preset in mobius/tiny/presets.py -> the mobius/models/<module>.py that declares its
# family (//testing/tiny:presets_test keeps both equal to the registry). The module
# names the family:<module> scope tag of the preset's packages (//tools:affected).
TINY_PRESET_FAMILIES = {
    "tiny-bert": "bert",
    "tiny-bert-mlm": "catalog",
    "tiny-bert-seq-cls": "catalog",
    "tiny-bert-tok-cls": "catalog",
    "tiny-cohere": "catalog",
    "tiny-cohere2": "catalog",
    "tiny-distilbert": "catalog",
    "tiny-distilbert-mlm": "catalog",
    "tiny-distilbert-seq-cls": "catalog",
    "tiny-distilbert-tok-cls": "catalog",
    "tiny-ernie4_5": "catalog",
    "tiny-exaone4": "catalog",
    "tiny-falcon": "catalog",
    "tiny-gemma": "catalog",
    "tiny-gemma2": "catalog",
    "tiny-gemma3": "catalog",
    "tiny-glm": "catalog",
    "tiny-glm4": "catalog",
    "tiny-gpt2": "catalog",
    "tiny-granite": "catalog",
    "tiny-granitemoe": "catalog",
    "tiny-hunyuan_v1_dense": "catalog",
    "tiny-llama": "catalog",
    "tiny-llava": "catalog",
    "tiny-mistral": "catalog",
    "tiny-mixtral": "catalog",
    "tiny-nemotron": "catalog",
    "tiny-olmo": "catalog",
    "tiny-olmo2": "catalog",
    "tiny-olmoe": "catalog",
    "tiny-phi": "catalog",
    "tiny-phi3": "catalog",
    "tiny-phi3.5": "catalog",
    "tiny-phimoe": "catalog",
    "tiny-qwen2": "catalog",
    "tiny-qwen2-moe": "catalog",
    "tiny-qwen3": "catalog",
    "tiny-qwen3-moe": "catalog",
    "tiny-roberta": "bert",
    "tiny-roberta-mlm": "catalog",
    "tiny-roberta-seq-cls": "catalog",
    "tiny-roberta-tok-cls": "catalog",
    "tiny-smollm3": "catalog",
    "tiny-stablelm": "catalog",
    "tiny-starcoder2": "catalog",
    "tiny-whisper": "catalog",
    "tiny-xlm-roberta": "bert",
    "tiny-xlm-roberta-mlm": "catalog",
    "tiny-xlm-roberta-seq-cls": "catalog",
    "tiny-xlm-roberta-tok-cls": "catalog",
}

TINY_PRESETS = sorted(TINY_PRESET_FAMILIES.keys())

def _tiny_checkpoint_impl(ctx):
    preset = ctx.attr.preset or ctx.label.name
    out = ctx.actions.declare_directory(ctx.label.name)
    ctx.actions.run(
        outputs = [out],
        executable = ctx.executable._generator,
        arguments = [preset, out.path],
        mnemonic = "TinyCheckpoint",
        progress_message = "Generating tiny checkpoint %s" % preset,
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

tiny_checkpoint = rule(
    implementation = _tiny_checkpoint_impl,
    doc = "A built-in tiny checkpoint (mobius/tiny/presets.py) generated at build time.",
    attrs = {
        "preset": attr.string(doc = "Preset name; defaults to the target name."),
        "_generator": attr.label(
            default = "//mobius/tiny:generate",
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
