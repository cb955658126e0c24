"""Weight quantization: RTN of float checkpoints and the per-EP quantized graph forms."""
