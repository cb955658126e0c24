"""onnx-standard: zero custom-domain ops; every com.microsoft op is inlined."""

from mobius.ep.capabilities import EpCapabilities

CAPABILITIES = EpCapabilities(
    name="onnx-standard",
    quant_form="dequantize_linear",
    ort_provider="CPUExecutionProvider",
    description="standard ONNX only (no com.microsoft ops), for non-ORT runtimes",
)
