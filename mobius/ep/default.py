"""default: portable ONNX; custom ops keep their function bodies, no vendor fusions."""

from mobius.ep.capabilities import EpCapabilities

CAPABILITIES = EpCapabilities(
    name="default",
    keep_function_bodies=True,
    description="portable graph for any ONNX runtime; no vendor fusions",
)
