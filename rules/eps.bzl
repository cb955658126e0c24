"""Generated from the EP files of mobius/ep by //tools:eps: do not edit.

    ./bazelw run //tools:eps -- --update

EP_DEPS: each EP module -> its py_library deps, from its imports (ep_capabilities adds
:capabilities and :init). EP_PRIMARY_DTYPES / EP_TASKS: each built-in EP's deployment dtype
(the zoo's packages) and the tasks it serves (None: every task), from its EpCapabilities.
"""

EP_DEPS = {
    "cpu": [
        ":contrib_ops",
        "//third_party:onnx_ir",
    ],
    "cuda": [
        ":contrib_ops",
        "//third_party:onnx_ir",
    ],
    "default": [],
    "dml": [
        ":contrib_ops",
        "//third_party:onnx_ir",
    ],
    "mlx": [
        ":contrib_ops",
        "//third_party:onnx_ir",
    ],
    "onnx_standard": [],
    "openvino": [
        ":contrib_ops",
        "//third_party:onnx_ir",
    ],
    "qnn": [],
    "trt_rtx": [
        ":contrib_ops",
        "//third_party:onnx_ir",
    ],
    "webgpu": [
        ":contrib_ops",
        "//third_party:onnx_ir",
    ],
}

EP_PRIMARY_DTYPES = {
    "cpu": "f32",
    "cuda": "f16",
    "default": "f32",
    "dml": "f16",
    "mlx": "f16",
    "onnx-standard": "f32",
    "openvino": "f32",
    "qnn": "f32",
    "trt-rtx": "f16",
    "webgpu": "f16",
}

EP_TASKS = {
    "cpu": None,
    "cuda": None,
    "default": None,
    "dml": None,
    "mlx": ["text-generation"],
    "onnx-standard": None,
    "openvino": None,
    "qnn": ["text-generation"],
    "trt-rtx": None,
    "webgpu": None,
}
