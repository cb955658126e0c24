"""ModelPackage: the ONNX model(s), genai_config.json and tokenizer, saved atomically.

Kept import-free so that each module is its own Bazel target with acyclic deps.
"""
