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

# Every preset in mobius/tiny/presets.py -> the mobius/models/<module>.py that declares its
# family (//testing/tiny:presets_test keeps both equal to the registry). The module
# names the family:<module> scope tag of the preset's packages (//tools:affected).
TINY_PRESET_FAMILIES = {
    "tiny-bart": "bart",
    "tiny-bert": "bert",
    "tiny-bert-mlm": "masked_lm",
    "tiny-bert-seq-cls": "classifiers",
    "tiny-bert-tok-cls": "classifiers",
    "tiny-cohere": "cohere",
    "tiny-cohere2": "cohere",
    "tiny-deepseek-v2": "deepseek",
    "tiny-deepseek-v3": "deepseek",
    "tiny-deberta-v2": "deberta_v2",
    "tiny-deberta-v2-seq-cls": "deberta_v2",
    "tiny-deberta-v2-tok-cls": "deberta_v2",
    "tiny-distilbert": "distilbert",
    "tiny-distilbert-mlm": "masked_lm",
    "tiny-distilbert-seq-cls": "classifiers",
    "tiny-distilbert-tok-cls": "classifiers",
    "tiny-ernie4_5": "ernie4_5",
    "tiny-ernie4_5_moe": "ernie4_5_moe",
    "tiny-exaone4": "exaone4",
    "tiny-falcon": "falcon",
    "tiny-gemma": "gemma",
    "tiny-gemma2": "gemma",
    "tiny-gemma3": "gemma",
    "tiny-gemma3-vl": "gemma3",
    "tiny-glm": "glm",
    "tiny-glm4": "glm",
    "tiny-glm4_moe": "glm4_moe",
    "tiny-gpt2": "gpt2",
    "tiny-gpt_oss": "gpt_oss",
    "tiny-granite": "granite",
    "tiny-granitemoe": "granitemoe",
    "tiny-granitemoehybrid": "granitemoehybrid",
    "tiny-hubert": "wav2vec2",
    "tiny-hunyuan_v1_dense": "hunyuan_v1_dense",
    "tiny-lfm2": "lfm2",
    "tiny-lfm2-moe": "lfm2_moe",
    "tiny-lfm2-vl": "lfm2_vl",
    "tiny-llama": "llama",
    "tiny-llava": "llava",
    "tiny-marian": "marian",
    "tiny-mistral": "mistral",
    "tiny-mistral3": "mistral3",
    "tiny-modernbert": "modernbert",
    "tiny-modernbert-mlm": "modernbert_heads",
    "tiny-modernbert-seq-cls": "modernbert_heads",
    "tiny-modernbert-tok-cls": "modernbert_heads",
    "tiny-mixtral": "mixtral",
    "tiny-mpnet": "mpnet",
    "tiny-mpnet-mlm": "masked_lm",
    "tiny-mpnet-seq-cls": "classifiers",
    "tiny-mpnet-tok-cls": "classifiers",
    "tiny-mt5": "t5",
    "tiny-nemotron": "nemotron",
    "tiny-olmo": "olmo",
    "tiny-olmo2": "olmo2",
    "tiny-olmoe": "olmoe",
    "tiny-phi": "phi",
    "tiny-phi3": "phi3",
    "tiny-phi3.5": "phi3",
    "tiny-phi4mm": "phi4_multimodal",
    "tiny-phimoe": "phimoe",
    "tiny-qwen2": "qwen",
    "tiny-qwen2-moe": "qwen_moe",
    "tiny-qwen2_5_vl": "qwen2_5_vl",
    "tiny-qwen3": "qwen",
    "tiny-qwen3-moe": "qwen_moe",
    "tiny-qwen3_vl": "qwen3_vl",
    "tiny-roberta": "bert",
    "tiny-roberta-mlm": "masked_lm",
    "tiny-roberta-seq-cls": "classifiers",
    "tiny-roberta-tok-cls": "classifiers",
    "tiny-smollm3": "smollm3",
    "tiny-stablelm": "stablelm",
    "tiny-starcoder2": "starcoder2",
    "tiny-wav2vec2": "wav2vec2",
    "tiny-t5": "t5",
    "tiny-whisper": "whisper",
    "tiny-xlm-roberta": "bert",
    "tiny-xlm-roberta-mlm": "masked_lm",
    "tiny-xlm-roberta-seq-cls": "classifiers",
    "tiny-xlm-roberta-tok-cls": "classifiers",
    "tiny-vit": "vit",
    "tiny-vit-img-cls": "vit",
    "tiny-dinov2": "dinov2",
    "tiny-dinov2-img-cls": "dinov2",
    "tiny-siglip-vision": "siglip",
    "tiny-siglip-img-cls": "siglip",
    "tiny-siglip": "siglip",
    "tiny-clip-vision": "clip_models",
    "tiny-clip-img-cls": "clip_models",
    "tiny-clip": "clip_models",
}

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
    doc = "A built-in tiny checkpoint (mobius/tiny/presets.py) generated at build time.",
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
