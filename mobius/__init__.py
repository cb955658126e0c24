"""mobius: build ONNX packages for ONNX Runtime from Hugging Face checkpoints."""
