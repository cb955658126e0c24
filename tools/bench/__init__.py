"""Modules of //tools:bench (tools/bench.py): checkpoint shapes, measuring, genai runs."""
