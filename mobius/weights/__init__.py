"""Checkpoint weights: streamed safetensors reading and dtype conversion.

Kept import-free so that each module is its own Bazel target with acyclic deps.
"""
