"""Reusable, EP-agnostic graph components (onnxscript.nn modules)."""
