"""com.microsoft ops mobius emits or fuses, each with its standard-op function body.

The body is the op's exact fallback in standard ONNX (opset 23): the inline
stage substitutes it wherever the target EP lacks the kernel, and the
"default" EP keeps it as a model-local function so any runtime can run it.
"""
