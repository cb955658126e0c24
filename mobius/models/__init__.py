"""Model families, one file each, and the registry keyed by HF model_type."""
