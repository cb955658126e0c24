"""Checkpoint weights: streamed safetensors reading and dtype conversion."""

from mobius.weights.dtypes import convert_array, parse_dtype
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint, TensorInfo

__all__ = ["SafetensorsCheckpoint", "TensorInfo", "convert_array", "parse_dtype"]
