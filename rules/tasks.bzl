"""Generated from the task files of mobius/tasks by //tools:tasks: do not edit.

    ./bazelw run //tools:tasks -- --update

TASK_DEPS: each module defining a TASK -> its py_library deps, from its imports (:init added).
"""

TASK_DEPS = {
    "causal_lm": [
        ":concrete_dims",
        ":task",
        "//mobius/config:architecture",
        "//mobius/package:genai_config",
        "//mobius:context",
        "//mobius:roles",
        "//third_party:onnx_ir",
        "//third_party:onnxscript",
    ],
    "ctc": [
        ":audio_processor",
        ":task",
        "//mobius/config:architecture",
        "//mobius/tiny:ctc_processor",
        "//mobius:context",
        "//mobius:roles",
        "//third_party:onnx_ir",
        "//third_party:onnxscript",
    ],
    "demo_fill_mask": [
        ":fill_mask",
    ],
    "encoder": [
        ":sentence_pooling",
        ":task",
        "//mobius/components:pooling",
        "//mobius/config:architecture",
        "//mobius:context",
        "//mobius:roles",
        "//third_party:onnx_ir",
        "//third_party:onnxscript",
    ],
    "fill_mask": [
        ":encoder",
        ":task",
        "//mobius:roles",
    ],
    "image_classification": [
        ":image",
        ":image_processor",
        ":labels",
        ":task",
        "//mobius:roles",
    ],
    "image_feature_extraction": [
        ":image",
        ":image_processor",
        ":task",
        "//mobius:roles",
    ],
    "speech_seq2seq": [
        ":causal_lm",
        ":concrete_dims",
        ":cross_kv_split",
        ":task",
        "//mobius/config:architecture",
        "//mobius/package:genai_config",
        "//mobius:context",
        "//mobius:roles",
        "//third_party:onnx_ir",
        "//third_party:onnxscript",
    ],
    "text2text": [
        ":causal_lm",
        ":concrete_dims",
        ":cross_kv_split",
        ":speech_seq2seq",
        ":task",
        "//mobius/config:architecture",
        "//mobius:context",
        "//mobius:roles",
        "//third_party:onnx_ir",
        "//third_party:onnxscript",
    ],
    "text_classification": [
        ":encoder",
        ":labels",
        ":task",
        "//mobius:roles",
    ],
    "token_classification": [
        ":encoder",
        ":labels",
        ":task",
        "//mobius:roles",
    ],
    "vision_language": [
        ":causal_lm",
        ":concrete_dims",
        ":image_processor",
        ":task",
        "//mobius/config:architecture",
        "//mobius/package:genai_config",
        "//mobius:context",
        "//mobius:roles",
        "//third_party:onnx_ir",
        "//third_party:onnxscript",
    ],
    "zero_shot_image_classification": [
        ":image",
        ":image_processor",
        ":task",
        "//mobius:roles",
    ],
}
