"""default: portable ONNX; custom ops keep their function bodies, no vendor fusions."""

from mobius.ep.capabilities import F32_F16, EpCapabilities

CAPABILITIES = EpCapabilities(
    name="default",
    compute_dtypes=F32_F16,
    keep_function_bodies=True,
    ort_provider="CPUExecutionProvider",
    description="portable graph for any ONNX runtime; no vendor fusions",
)
