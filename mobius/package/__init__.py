"""ModelPackage: the ONNX model(s), genai_config.json and tokenizer, saved atomically."""

from mobius.package.model_package import ModelPackage

__all__ = ["ModelPackage"]
